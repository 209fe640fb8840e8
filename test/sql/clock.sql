--
-- clock: decisions use the server clock at the moment of the call, never
-- the transaction's start time
--

-- a lease granted late in a long transaction runs from the grant
BEGIN;
SELECT pg_sleep(0.3);
SELECT distlock.try_acquire('late', 'w1', '1 second') IS NOT NULL AS granted;
SELECT acquired_at - now() >= interval '0.3 seconds' AS from_grant_time,
	   expires_at - acquired_at AS lease
  FROM distlock.locks WHERE name = 'late';
COMMIT;

-- inside one transaction, a lease that ran out is taken over, and a session
-- that ran out cannot heartbeat, though now() has not moved
BEGIN;
SELECT distlock.try_acquire('brief', 'w1', '200 milliseconds') AS t1 \gset
SELECT distlock.session_open('200 milliseconds') AS s \gset
SELECT pg_sleep(0.3);
SELECT distlock.try_acquire('brief', 'w2') > :t1 AS taken_over;
SELECT distlock.heartbeat(:'s');
SELECT distlock.fence('brief', :t1);
ROLLBACK;

-- the same, with the session acknowledging a job
SELECT distlock.enqueue('clock', '{}') AS j \gset
BEGIN;
SELECT distlock.session_open('200 milliseconds') AS s \gset
SELECT count(*) FROM distlock.claim('clock', :'s');
SELECT pg_sleep(0.3);
SELECT distlock.complete(:j, :'s');
ROLLBACK;
