--
-- tokens: fencing tokens keep their order whatever is done to the sequence
-- they come from
--

-- a sequence that could hand out tokens out of order is refused: cached
-- values, a step downwards, wrapping around, restarting after a crash
ALTER SEQUENCE distlock.token_seq CACHE 20;
SELECT attempt('distlock.try_acquire(''tok'', ''a'')');
ALTER SEQUENCE distlock.token_seq CACHE 1 INCREMENT -1;
SELECT attempt('distlock.try_acquire(''tok'', ''a'')');
ALTER SEQUENCE distlock.token_seq INCREMENT 1 CYCLE;
SELECT attempt('distlock.try_acquire(''tok'', ''a'')');
ALTER SEQUENCE distlock.token_seq NO CYCLE;
ALTER SEQUENCE distlock.token_seq SET UNLOGGED;
SELECT attempt('distlock.try_acquire(''tok'', ''a'')');
ALTER SEQUENCE distlock.token_seq SET LOGGED;
SELECT count(*) AS granted FROM distlock.locks WHERE name = 'tok';

-- restored, grants go on from above every token handed out
SELECT distlock.try_acquire('tok', 'a') >
	   (SELECT max(token) FROM distlock.locks WHERE name <> 'tok') AS larger;
SELECT distlock.release('tok', 'a');

-- The epoch (src/token.c): a token is epoch * 2^40 + n, with epoch = base +
-- timeline - 1.  Installed here: one row naming this cluster, base 0, so on
-- timeline 1 tokens are small.
SELECT count(*) AS rows, bool_and(e.base = 0) AS base_0,
	   bool_and(e.system_identifier = c.system_identifier) AS this_cluster
FROM distlock.token_epoch e, pg_control_system() c;
SELECT pg_current_wal_lsn() IS NOT NULL AS primary,
	   (SELECT timeline_id FROM pg_control_checkpoint()) AS timeline;
SELECT distlock.try_acquire('ep', 'a') < 2 ^ 40 AS epoch_0;
SELECT distlock.release('ep', 'a');

-- A restore or pg_upgrade into another cluster brings that cluster's row
-- along (beside the one CREATE EXTENSION wrote) and a sequence that may be
-- in a later epoch.  No lease is granted (55000) until maintain() has
-- rebased in a transaction of its own, on the epoch after the sequence's
-- (the dumped server may have granted more since).  Each backend checks
-- once per timeline, hence the new connections.
SELECT setval('distlock.token_seq', (3 * 2 ^ 40)::bigint + 5) > 0 AS set;
INSERT INTO distlock.token_epoch VALUES (42, 2);
\c
SELECT distlock.try_acquire('ep', 'b');
SELECT attempt('distlock.try_acquire(''ep'', ''b'')');
-- rebased in a transaction that then grants: refused until it commits
BEGIN;
SELECT reaped FROM distlock.maintain();
SELECT distlock.try_acquire('ep', 'b');
ROLLBACK;
SELECT count(*) AS rows FROM distlock.token_epoch;
SELECT reaped FROM distlock.maintain();
SELECT count(*) AS rows, bool_and(e.base = 4) AS base_4,
	   bool_and(e.system_identifier = c.system_identifier) AS this_cluster
FROM distlock.token_epoch e, pg_control_system() c;
SELECT distlock.try_acquire('ep', 'b') - 4 * 2 ^ 40 AS in_epoch_4;
SELECT distlock.release('ep', 'b');
-- a second maintain() finds nothing to rebase
SELECT reaped FROM distlock.maintain();
SELECT base FROM distlock.token_epoch;

-- a dump restored into another database of this cluster leaves two rows
-- naming it: the larger base serves, nothing to rebase; a base above the
-- sequence raises it to the epoch's start first
INSERT INTO distlock.token_epoch
	SELECT system_identifier, 5 FROM pg_control_system();
\c
SELECT distlock.try_acquire('ep', 'a') - 5 * 2 ^ 40 AS in_epoch_5;
SELECT distlock.try_acquire('ep2', 'a') - 5 * 2 ^ 40 AS next;
SELECT distlock.release('ep', 'a'), distlock.release('ep2', 'a');

-- an empty table counts as another cluster's: refused, then rebased on the
-- epoch after the sequence's, nothing goes back
DELETE FROM distlock.token_epoch;
\c
SELECT attempt('distlock.try_acquire(''ep'', ''b'')');
SELECT reaped FROM distlock.maintain();
SELECT distlock.try_acquire('ep', 'b') - 6 * 2 ^ 40 AS in_epoch_6;
SELECT base FROM distlock.token_epoch;
SELECT distlock.release('ep', 'b');

-- base is 0 to 2^23 - 1, so that epoch * 2^40 fits in a bigint: 23514
\set VERBOSITY terse
UPDATE distlock.token_epoch SET base = 8388608;
UPDATE distlock.token_epoch SET base = -1;
\set VERBOSITY default

-- a token past its epoch (a setval() by hand here; 2^40 grants on one
-- timeline, or a restore's sequence arriving after the rebase, in life) is
-- in an epoch the next timeline draws from: refused with 54000, nothing
-- granted, until maintain() has rebased on the sequence's epoch
SELECT distlock.try_acquire('ep', 'a') - 6 * 2 ^ 40 AS in_epoch_6;
SELECT setval('distlock.token_seq', (7 * 2 ^ 40)::bigint) > 0 AS set;
SELECT attempt('distlock.try_acquire(''ep2'', ''a'')');
SELECT distlock.try_acquire('ep2', 'a');
SELECT owner FROM distlock.locks WHERE name = 'ep2';
SELECT reaped FROM distlock.maintain();
SELECT base FROM distlock.token_epoch;
SELECT distlock.try_acquire('ep2', 'a') - 7 * 2 ^ 40 AS in_epoch_7;
SELECT distlock.release('ep', 'a'), distlock.release('ep2', 'a');

-- a sequence set back by hand: a grant whose token would not be above the
-- lock's last one is refused (55000) and leaves the lock as it was; a
-- token equal to the last is not above it
SELECT distlock.try_acquire('back', 'a') AS t \gset
SELECT distlock.release('back', 'a');
SELECT setval('distlock.token_seq', :t - 1) > 0 AS set;
SELECT replace(attempt('distlock.try_acquire(''back'', ''b'')'), :'t', '<t>');
SELECT setval('distlock.token_seq', :t - 2) > 0 AS set;
SELECT replace(replace(attempt('distlock.try_acquire(''back'', ''b'')'),
					   :'t', '<t>'), (:t - 1)::text, '<t - 1>');
SELECT owner, token = :t AS last_token FROM distlock.locks WHERE name = 'back';
-- once the sequence is past it again, grants go on
SELECT setval('distlock.token_seq', :t) > 0 AS set;
SELECT distlock.try_acquire('back', 'b') = :t + 1 AS above;
SELECT distlock.release('back', 'b');

-- pg_restore sets sequences after every table's rows: while the restored
-- lock rows are there and the sequence is still as CREATE EXTENSION made
-- it, there is no rebase and no grant; once it is restored, the base is
-- past every epoch the restore shows (the other cluster's base 9 here)
DELETE FROM distlock.token_epoch;
INSERT INTO distlock.token_epoch VALUES (42, 9);
SELECT setval('distlock.token_seq', 1, false) > 0 AS not_restored_yet;
\c
SELECT reaped FROM distlock.maintain();
SELECT base FROM distlock.token_epoch;
SELECT attempt('distlock.try_acquire(''r1'', ''a'')');
SELECT setval('distlock.token_seq', (9 * 2 ^ 40)::bigint + 7) > 0 AS restored;
SELECT reaped FROM distlock.maintain();
SELECT base FROM distlock.token_epoch;
SELECT distlock.try_acquire('r1', 'a') - 10 * 2 ^ 40 AS in_epoch_10;
-- set back by hand below its epoch afterwards: the next grant of a
-- backend that drew before moves the sequence to the next epoch and is
-- refused (55000); grants are then past their epoch (54000) until
-- maintain() has rebased on it, and no token drawn before comes again
SELECT setval('distlock.token_seq', (9 * 2 ^ 40)::bigint + 7) > 0 AS set_back;
SELECT attempt('distlock.try_acquire(''r2'', ''a'')');
SELECT attempt('distlock.try_acquire(''r2'', ''a'')');
SELECT reaped FROM distlock.maintain();
SELECT base FROM distlock.token_epoch;
SELECT distlock.try_acquire('r2', 'a') - 11 * 2 ^ 40 AS in_epoch_11;
SELECT distlock.release('r1', 'a'), distlock.release('r2', 'a');

-- the last epoch, 2^23 - 1, has none after it: a restore that shows it is
-- never rebased (maintain() warns, once per connection, and goes on with
-- the rest of its work) and grants stay refused (55000); a sequence set
-- back below it is refused (54000) and left where it is
SELECT last_value AS seq0 FROM distlock.token_seq \gset
SELECT base AS base0 FROM distlock.token_epoch \gset
DELETE FROM distlock.token_epoch;
INSERT INTO distlock.token_epoch VALUES (42, 8388607);
\c
SELECT reaped FROM distlock.maintain();
SELECT reaped FROM distlock.maintain();
SELECT base, system_identifier = 42 AS other_cluster FROM distlock.token_epoch;
SELECT attempt('distlock.try_acquire(''last'', ''a'')');
DELETE FROM distlock.token_epoch;
INSERT INTO distlock.token_epoch
	SELECT system_identifier, 8388607 FROM pg_control_system();
\c
SELECT distlock.try_acquire('last', 'a') - (8388607::bigint << 40) AS in_last_epoch;
SELECT setval('distlock.token_seq', (8388606::bigint << 40) + 5) > 0 AS set_back;
SELECT attempt('distlock.try_acquire(''last2'', ''a'')');
SELECT last_value - (8388606::bigint << 40) AS left_at FROM distlock.token_seq;
SELECT distlock.release('last', 'a');
-- (as it was before, for the tests after this one)
DELETE FROM distlock.locks WHERE name = 'last';
DELETE FROM distlock.token_epoch;
INSERT INTO distlock.token_epoch
	SELECT system_identifier, :base0 FROM pg_control_system();
SELECT setval('distlock.token_seq', :seq0) > 0 AS set_again;
\c
