--
-- wait: the waiting procedures' surface (their waiting is in
-- test/scripts/wait.sh), and maintain()
--

SELECT distlock.session_open('1 minute') AS w \gset

-- work already there: claimed at once, as jsonb objects with the columns
-- of distlock.jobs, which jsonb_populate_recordset() turns back into rows
SELECT distlock.enqueue('wq', '{"n": 1}') AS j1 \gset
SELECT distlock.enqueue('wq', '{"n": 2}', priority => 5) AS j2 \gset
CALL distlock.claim_wait('wq', :'w', 5, '10 s') \gset
SELECT jsonb_typeof(:'jobs'::jsonb) AS kind,
	   (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(:'jobs'::jsonb -> 0) k)
	   = (SELECT array_agg(attname::text ORDER BY attname) FROM pg_attribute
		   WHERE attrelid = 'distlock.jobs'::regclass AND attnum > 0
			 AND NOT attisdropped) AS every_column;
SELECT j.id = :j2 AS first_by_priority, j.status, j.attempts,
	   j.session_id = :'w' AS ours, j.payload
  FROM jsonb_populate_recordset(NULL::distlock.jobs, :'jobs') WITH ORDINALITY AS j
 ORDER BY ordinality;
SELECT status, count(*) FROM distlock.jobs WHERE queue = 'wq' GROUP BY status;

-- nothing to claim, and no wait: an empty array
CALL distlock.claim_wait('wq', :'w', 1, '0');
-- a short wait that nothing ends: the same
CALL distlock.claim_wait('wq', :'w', 1, '50 ms');

-- complete_and_claim_wait: the acknowledgement, then the next job
SELECT distlock.enqueue('wq', '{"n": 3}') AS j3 \gset
CALL distlock.complete_and_claim_wait(:j2, :'w', '{"ok": true}', 1, '10 s') \gset
SELECT jsonb_path_query_array(:'jobs', '$[*].id') = jsonb_build_array(:j3) AS claimed_next;
SELECT id = :j3 AS next, status, result FROM distlock.jobs WHERE id IN (:j2, :j3) ORDER BY id;
-- a refused acknowledgement raises 55000, as complete_and_claim()'s does
\set VERBOSITY sqlstate
CALL distlock.complete_and_claim_wait(:j2, :'w');
\set VERBOSITY default
-- with distlock.delete_completed the acknowledgement deletes the job, and
-- the wait that follows claims from the job's queue (read before the job
-- went): the job that becomes due there while it waits
SET distlock.delete_completed = on;
SELECT distlock.enqueue('wq', '{"n": 4}', run_at => clock_timestamp() + interval '300 ms') AS j4 \gset
CALL distlock.complete_and_claim_wait(:j3, :'w', NULL, 1, '10 s') \gset
SELECT jsonb_path_query_array(:'jobs', '$[*].id') = jsonb_build_array(:j4) AS claimed_due;
SELECT count(*) AS j3_rows FROM distlock.jobs WHERE id = :j3;
-- and on an empty queue, a short wait ends with an empty array
CALL distlock.complete_and_claim_wait(:j4, :'w', NULL, 1, '50 ms');
\set VERBOSITY sqlstate
CALL distlock.complete_and_claim_wait(:j3, :'w');
\set VERBOSITY default
RESET distlock.delete_completed;

-- inside a transaction block a waiting call cannot commit: only wait 0
BEGIN;
CALL distlock.claim_wait('wq', :'w', 1, '1 s');
ROLLBACK;
BEGIN;
CALL distlock.claim_wait('wq', :'w', 1, '0');
CALL distlock.acquire('wl', 'a', wait => '0') \gset
SELECT :token > 0 AS granted;
ROLLBACK;

-- acquire: a free lock at once; a held one, NULL when the wait is over
CALL distlock.acquire('wl', 'a', '1 minute', wait => '10 s') \gset
SELECT owner, token = :token AS its_token FROM distlock.active_locks WHERE name = 'wl';
CALL distlock.acquire('wl', 'b', '1 minute', wait => '50 ms');
CALL distlock.acquire('wl', 'b', '1 minute', wait => '0');
-- re-entry keeps the token, as try_acquire()'s does
SELECT token AS t FROM distlock.locks WHERE name = 'wl' \gset
CALL distlock.acquire('wl', 'a', '1 minute', wait => '10 s') \gset
SELECT :token = :t AS same_token;

-- bad input: the SQLSTATEs of the calls they extend, checked before any wait
\set VERBOSITY sqlstate
CALL distlock.claim_wait(NULL, :'w');
CALL distlock.claim_wait('', :'w');
CALL distlock.claim_wait('wq', NULL);
CALL distlock.claim_wait('wq', :'w', 0);
CALL distlock.claim_wait('wq', :'w', 1, NULL);
CALL distlock.claim_wait('wq', :'w', 1, '-1 s');
CALL distlock.claim_wait('wq', :'w', 1, '400 days');
CALL distlock.claim_wait('wq', '00000000-0000-0000-0000-000000000000', 1, '1 s');
CALL distlock.complete_and_claim_wait(NULL, :'w');
CALL distlock.complete_and_claim_wait(-1, :'w');
CALL distlock.complete_and_claim_wait(:j3, :'w', NULL, 1, '-1 s');
CALL distlock.acquire(NULL, 'a');
CALL distlock.acquire('wl', NULL);
CALL distlock.acquire('wl', 'a', wait => NULL);
CALL distlock.acquire('wl', 'a', wait => '-1 s');
SELECT * FROM distlock.maintain(NULL);
\set VERBOSITY default

-- maintain(): one pass; nothing is past its retention yet (the sessions
-- earlier tests left to expire are reaped)
SELECT jobs_pruned, locks_pruned FROM distlock.maintain();
SET distlock.job_retention = 0;
SELECT distlock.cancel(:j1);
SELECT jobs_pruned >= 2 AS pruned FROM distlock.maintain();
SELECT count(*) FROM distlock.jobs WHERE id = :j1;
-- retention is the server's, not any role's
RESET distlock.job_retention;
CREATE ROLE distlock_wait_user;
SET ROLE distlock_wait_user;
SET distlock.job_retention = 0;
RESET ROLE;
DROP ROLE distlock_wait_user;

SELECT distlock.session_close(:'w');
