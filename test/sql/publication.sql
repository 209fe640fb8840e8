--
-- publication: a publication FOR ALL TABLES (logical replication, change
-- data capture) publishes updates and deletes of distlock's tables, and
-- PostgreSQL then refuses both on a table it cannot identify rows of
-- (55000).  Every table distlock updates or deletes from has a primary key
-- or REPLICA IDENTITY FULL, so no call is refused.
--

-- (the WARNING about wal_level depends on the cluster)
SET client_min_messages = error;
CREATE PUBLICATION distlock_all FOR ALL TABLES;
RESET client_min_messages;
SELECT c.relname, c.relreplident,
	   EXISTS (SELECT FROM pg_index i
			   WHERE i.indrelid = c.oid AND i.indisprimary) AS has_pkey
FROM pg_class c
WHERE c.relnamespace = 'distlock'::regnamespace AND c.relkind = 'r'
ORDER BY 1;

-- sessions, leases, fences
SELECT distlock.session_open('1 minute', 'pub') AS s \gset
SELECT distlock.heartbeat(:'s');
SELECT distlock.try_acquire('pub-lock', 'pub', '1 minute', :'s') AS t \gset
SELECT distlock.renew('pub-lock', 'pub', '2 minutes');
SELECT distlock.fence('pub-lock', :t);
SELECT distlock.release('pub-lock', 'pub');
SELECT distlock.try_acquire('pub-lock', 'pub') > :t AS regranted;

-- jobs: every acknowledgement, a retry and a cancel
SELECT count(*) FROM (SELECT distlock.enqueue('pub', '{}')
					  FROM generate_series(1, 5)) e;
SELECT id AS c1 FROM distlock.claim('pub', :'s') \gset
SELECT distlock.fail(:c1, :'s', 'again', '0 seconds');
SELECT id AS c2 FROM distlock.claim('pub', :'s') \gset
SELECT distlock.complete(:c2, :'s');
SELECT id AS c3 FROM distlock.claim('pub', :'s') \gset
SELECT id AS c4 FROM distlock.complete_and_claim(:c3, :'s', '{}') \gset
SELECT count(*) FROM distlock.complete_batch(ARRAY[:c4], :'s');
SELECT id AS c5 FROM distlock.claim('pub', :'s') \gset
SELECT count(*) FROM distlock.complete_batch_and_claim(ARRAY[:c5], :'s');
SELECT distlock.enqueue('pub', '{}') AS c6 \gset
SELECT distlock.cancel(:c6);
SELECT distlock.cancel_jobs('pub');
SELECT status, count(*) FROM distlock.jobs WHERE queue = 'pub'
GROUP BY 1 ORDER BY 1;
SELECT distlock.session_close(:'s');

-- throttles (a bucket created, then drawn on), limits, queue grants
SELECT distlock.throttle('pub', '1 hour', 2), distlock.throttle('pub', '1 hour', 2);
CREATE ROLE distlock_pub_a;
CREATE ROLE distlock_pub_b;
SELECT distlock.set_limit('sessions', 10, 'distlock_pub_a');
SELECT distlock.set_limit('sessions', 20, 'distlock_pub_a');
SELECT distlock.grant_queue('pub', 'claim', 'distlock_pub_a');
SELECT distlock.revoke_queue('pub', 'claim', 'distlock_pub_a');
SELECT distlock.grant_queue('pub', 'claim', 'distlock_pub_a');

-- a role's rows moved to another role, then removed
GRANT USAGE ON SCHEMA distlock TO distlock_pub_a;
SET ROLE distlock_pub_a;
SELECT distlock.session_open('1 minute', 'pub-a') IS NOT NULL AS opened,
	   distlock.try_acquire('pub-lock-a', 'a') IS NOT NULL AS granted,
	   distlock.enqueue('pub-a', '{}') IS NOT NULL AS enqueued,
	   distlock.throttle('pub-a', '1 hour') AS permitted;
SELECT distlock.grant_queue('pub-a', 'enqueue', 'distlock_pub_b');
RESET ROLE;
SELECT * FROM distlock.reassign_owned('distlock_pub_a', 'distlock_pub_b');
SELECT * FROM distlock.drop_owned('distlock_pub_b');
REVOKE USAGE ON SCHEMA distlock FROM distlock_pub_a;
DROP ROLE distlock_pub_a, distlock_pub_b;

-- a session reaped
SELECT distlock.session_open('1 second', 'pub-reaped') AS r \gset
SELECT pg_sleep(1.1);
SELECT reaped > 0 AS reaped FROM distlock.maintain();
SELECT count(*) FROM distlock.sessions WHERE id = :'r';

-- the token epoch rebased, as after a restore into another cluster (an
-- empty token_epoch counts as another cluster's: grants wait for the
-- rebase)
DELETE FROM distlock.token_epoch;
\c
SELECT attempt('distlock.try_acquire(''pub-epoch'', ''pub'')');
SELECT reaped >= 0 AS ran FROM distlock.maintain();
SELECT count(*) AS rows FROM distlock.token_epoch;
SELECT distlock.try_acquire('pub-epoch', 'pub') IS NOT NULL AS granted;
SELECT distlock.release('pub-epoch', 'pub');

DROP PUBLICATION distlock_all;
