--
-- queue_retry: fail, retries with backoff, dead letters
--

SELECT distlock.session_open('1 minute') AS w \gset

-- fail with retry_in 0: pending again at once, attempts kept
SELECT distlock.enqueue('retry', '{}', max_attempts => 3) AS j \gset
SELECT attempts FROM distlock.claim('retry', :'w');
SELECT distlock.fail(:j, :'w', 'boom', '0 seconds');
SELECT status, attempts, last_error, session_id IS NULL AS unclaimed
  FROM distlock.jobs WHERE id = :j;

-- fail with retry_in: not due until then
SELECT attempts FROM distlock.claim('retry', :'w');
SELECT distlock.fail(:j, :'w', 'again', '1 hour');
SELECT status, run_at - clock_timestamp() BETWEEN '59 minutes' AND '1 hour' AS delayed
  FROM distlock.jobs WHERE id = :j;
SELECT count(*) FROM distlock.claim('retry', :'w');

-- the last attempt fails for good: a dead letter
UPDATE distlock.jobs SET run_at = clock_timestamp() WHERE id = :j;
SELECT attempts FROM distlock.claim('retry', :'w');
SELECT distlock.fail(:j, :'w', 'third strike');
SELECT status, attempts, last_error, finished_at IS NOT NULL AS finished,
	   session_id = :'w' AS last_claimer
  FROM distlock.jobs WHERE id = :j;
SELECT distlock.fail(:j, :'w');
SELECT distlock.complete(:j, :'w');

-- default backoff: min(2^attempts s, 1 h) times a jitter in [0.5, 1)
SELECT distlock.enqueue('backoff', '{}', max_attempts => 20) AS b \gset
CREATE TEMP TABLE delays (attempts int, delay interval);
DO $$
DECLARE
	w uuid := distlock.session_open('1 minute');
	job distlock.jobs;
BEGIN
	FOR i IN 1..14 LOOP
		UPDATE distlock.jobs SET run_at = clock_timestamp() WHERE queue = 'backoff';
		SELECT * INTO job FROM distlock.claim('backoff', w);
		PERFORM distlock.fail(job.id, w);
		INSERT INTO delays
			SELECT j.attempts, j.run_at - clock_timestamp()
			  FROM distlock.jobs j WHERE j.id = job.id;
	END LOOP;
	PERFORM distlock.session_close(w);
END $$;
SELECT attempts,
	   delay <= least(2 ^ attempts, 3600) * interval '1 second' AS within_cap,
	   delay >= least(2 ^ attempts, 3600) * interval '0.5 second' - interval '50 ms' AS above_half
  FROM delays ORDER BY attempts;

-- a session that ends holding a job on its last attempt fails the job
SELECT distlock.session_open('100 milliseconds') AS short \gset
SELECT distlock.enqueue('last', '{}', max_attempts => 1) AS l \gset
SELECT attempts FROM distlock.claim('last', :'short');
SELECT pg_sleep(0.2);
SELECT distlock.reap();
SELECT status, last_error, finished_at IS NOT NULL AS finished
  FROM distlock.jobs WHERE id = :l;

-- a failure with the session gone is refused
SELECT distlock.enqueue('gone', '{}') AS g \gset
SELECT distlock.session_open('1 minute') AS w2 \gset
SELECT count(*) FROM distlock.claim('gone', :'w2');
SELECT distlock.session_close(:'w2');
SELECT distlock.fail(:g, :'w2', 'late');
SELECT status, last_error FROM distlock.jobs WHERE id = :g;

SELECT distlock.session_close(:'w');
