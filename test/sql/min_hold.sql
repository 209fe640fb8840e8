--
-- min_hold: a lock kept from other owners for a minimum time after its
-- grant, even when its holder releases it earlier (lockAtLeastFor)
--

-- the hold is counted from the grant
SELECT distlock.try_acquire('hold nightly', 'w1', '1 minute', NULL, '1 hour') AS t1 \gset
SELECT hold_until - acquired_at AS hold FROM distlock.locks WHERE name = 'hold nightly';

-- while held, min_hold changes nothing for the holder or the others
SELECT distlock.try_acquire('hold nightly', 'w2') IS NULL AS refused;
SELECT distlock.renew('hold nightly', 'w1', '2 minutes');
SELECT name, owner, expires_at - renewed_at AS lease,
	   remaining > '59 minutes' AND remaining <= '1 hour' AS remaining_hold
  FROM distlock.active_locks WHERE name = 'hold nightly';

-- an early release succeeds, and leaves the lock held by nobody who can
-- renew it until the hold has passed: not the old owner, not another
SELECT distlock.release('hold nightly', 'w1');
SELECT distlock.try_acquire('hold nightly', 'w2') IS NULL AS refused;
SELECT distlock.try_acquire('hold nightly', 'w1') IS NULL AS refused_to_old_owner;
SELECT distlock.renew('hold nightly', 'w1');
SELECT distlock.release('hold nightly', 'w1');
SELECT replace(attempt('distlock.fence(''hold nightly'', ' || :t1 || ')'), :'t1', '<t1>');
SELECT name, owner, session_id, token = :t1 AS same_token, expires_at,
	   remaining > '59 minutes' AND remaining <= '1 hour' AS remaining_hold,
	   hold_until = acquired_at + '1 hour' AS hold_from_grant
  FROM distlock.active_locks WHERE name = 'hold nightly';
SELECT owner, token = :t1 AS same_token FROM distlock.locks WHERE name = 'hold nightly';

-- once the hold has passed, another owner gets the lock, with a larger token
SELECT distlock.try_acquire('hold short', 'w1', '1 minute', NULL, '300 milliseconds') AS s1 \gset
SELECT distlock.release('hold short', 'w1');
SELECT distlock.try_acquire('hold short', 'w2') IS NULL AS refused;
SELECT pg_sleep(0.4);
SELECT count(*) FROM distlock.active_locks WHERE name = 'hold short';
SELECT distlock.try_acquire('hold short', 'w2') > :s1 AS larger;
SELECT owner, hold_until FROM distlock.active_locks WHERE name = 'hold short';

-- a release after the hold frees the lock at once
SELECT distlock.try_acquire('hold done', 'w1', '1 minute', NULL, '100 milliseconds') IS NOT NULL AS granted;
SELECT pg_sleep(0.2);
SELECT distlock.release('hold done', 'w1');
SELECT distlock.try_acquire('hold done', 'w2') IS NOT NULL AS granted;

-- re-entry keeps the token and acquired_at and takes the new min_hold,
-- counted from that acquired_at; without one, the hold is gone
SELECT distlock.try_acquire('hold again', 'w1', '1 minute', NULL, '1 hour') AS a1 \gset
SELECT distlock.try_acquire('hold again', 'w1', '1 minute', NULL, '2 hours') = :a1 AS same_token;
SELECT hold_until - acquired_at AS hold FROM distlock.locks WHERE name = 'hold again';
SELECT distlock.try_acquire('hold again', 'w1') = :a1 AS same_token;
SELECT hold_until FROM distlock.locks WHERE name = 'hold again';
SELECT distlock.release('hold again', 'w1');
SELECT distlock.try_acquire('hold again', 'w2') > :a1 AS free_at_once;

-- min_hold may be longer than ttl: after the lease runs out, the lock stays
-- taken until the hold has passed; its owner, whose claim is intact, may
-- still renew it, keeping its token
SELECT distlock.try_acquire('hold outlast', 'w1', '100 milliseconds', NULL, '1 second') AS o1 \gset
SELECT pg_sleep(0.2);
SELECT distlock.try_acquire('hold outlast', 'w2') IS NULL AS refused;
SELECT owner, expires_at < now() AS lease_ran_out,
	   remaining > '0' AND remaining < '1 second' AS remaining_hold
  FROM distlock.active_locks WHERE name = 'hold outlast';
SELECT distlock.renew('hold outlast', 'w1', '100 milliseconds');
SELECT token = :o1 AS same_token FROM distlock.locks WHERE name = 'hold outlast';
SELECT pg_sleep(1);
SELECT count(*) FROM distlock.active_locks WHERE name = 'hold outlast';
SELECT distlock.try_acquire('hold outlast', 'w2') > :o1 AS taken_over;

-- a session-bound lease: the end of its session does not end the hold
SELECT distlock.session_open('1 hour', 'worker') AS sid \gset
SELECT distlock.try_acquire('hold bound', 'w1', NULL, :'sid', '1 hour') IS NOT NULL AS granted;
SELECT distlock.session_close(:'sid');
SELECT distlock.try_acquire('hold bound', 'w2') IS NULL AS refused;
SELECT distlock.try_acquire('hold bound', 'w1') IS NULL AS refused_to_old_owner;
SELECT owner, session_id, remaining > '59 minutes' AS remaining_hold
  FROM distlock.active_locks WHERE name = 'hold bound';

-- ttl NULL: held until released, then held on for the rest of the hold
SELECT distlock.try_acquire('hold mutex', 'w1', NULL, min_hold => '1 hour') IS NOT NULL AS granted;
SELECT owner, expires_at, remaining FROM distlock.active_locks WHERE name = 'hold mutex';
SELECT distlock.release('hold mutex', 'w1');
SELECT owner, expires_at, remaining > '59 minutes' AS remaining_hold
  FROM distlock.active_locks WHERE name = 'hold mutex';

-- min_hold by name, with the other arguments left at their defaults
SELECT distlock.try_acquire('hold named', 'w1', min_hold => '1 hour') IS NOT NULL AS granted;
SELECT expires_at - acquired_at AS lease, hold_until - acquired_at AS hold
  FROM distlock.locks WHERE name = 'hold named';
SELECT distlock.try_acquire('hold longest', 'w1', min_hold => '366 days') IS NOT NULL AS granted;

-- bad input: min_hold must be positive and at most 366 days; the refused
-- call changes nothing, even for the holder
SELECT state() AS before \gset
SELECT call, attempt(call) AS outcome FROM (VALUES
	('distlock.try_acquire(''n'', ''o'', ''1 minute'', NULL, ''0 seconds'')'),
	('distlock.try_acquire(''n'', ''o'', ''1 minute'', NULL, ''-1 second'')'),
	('distlock.try_acquire(''n'', ''o'', ''1 minute'', NULL, ''1 month -30 days'')'),
	('distlock.try_acquire(''n'', ''o'', ''1 minute'', NULL, ''367 days'')'),
	('distlock.try_acquire(''hold named'', ''w1'', min_hold => ''-1 hour'')'),
	('distlock.try_acquire(''hold named'', ''w1'', min_hold => ''1000 years'')')
) v(call);
SELECT state() = :'before' AS unchanged;


-- at READ COMMITTED a refusal locks nothing and writes nothing, not even a
-- transaction id: held by another owner, or on hold
SELECT distlock.try_acquire('refuse held', 'w1', '1 hour') IS NOT NULL AS granted;
SELECT state() AS before \gset
BEGIN;
SELECT distlock.try_acquire('refuse held', 'w2') IS NULL AS refused;
SELECT distlock.try_acquire('hold mutex', 'w2') IS NULL AS refused_on_hold;
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid;
COMMIT;
SELECT state() = :'before' AS unchanged;
-- the same for a lease bound to a live session
SELECT distlock.session_open('1 hour', 'refusal') AS rs \gset
SELECT distlock.try_acquire('refuse bound', 'w1', '1 hour', :'rs') IS NOT NULL AS granted;
BEGIN;
SELECT distlock.try_acquire('refuse bound', 'w2') IS NULL AS refused;
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid;
COMMIT;
-- at REPEATABLE READ too, the refusal is decided on the committed row
-- (which the snapshot sees) and locks nothing
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT distlock.try_acquire('refuse held', 'w2') IS NULL AS refused;
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid;
COMMIT;
-- a re-entry, and a grant once the lock is released, write as before
BEGIN;
SELECT distlock.try_acquire('refuse held', 'w1', '1 hour') IS NOT NULL AS reentered;
SELECT pg_current_xact_id_if_assigned() IS NOT NULL AS has_xid;
COMMIT;
SELECT distlock.release('refuse held', 'w1');
BEGIN;
SELECT distlock.try_acquire('refuse held', 'w2') IS NOT NULL AS granted;
SELECT pg_current_xact_id_if_assigned() IS NOT NULL AS has_xid;
COMMIT;
SELECT owner FROM distlock.active_locks WHERE name = 'refuse held';
SELECT distlock.session_close(:'rs');
