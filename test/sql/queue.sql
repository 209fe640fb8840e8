--
-- queue: enqueue, claim, complete, cancel
--

SELECT distlock.session_open('1 minute', 'w1') AS w1 \gset
SELECT distlock.session_open('1 minute', 'w2') AS w2 \gset

-- claim order: priority (higher first), then run_at, then id
SELECT distlock.enqueue('mail', '{"n": 1}') AS j1 \gset
SELECT distlock.enqueue('mail', '{"n": 2}', priority => 5) AS j2 \gset
SELECT distlock.enqueue('mail', '{"n": 3}', run_at => clock_timestamp() - interval '1 hour') AS j3 \gset
SELECT distlock.enqueue('mail', '{"n": 4}') AS j4 \gset
SELECT distlock.enqueue('mail', '{"n": 5}', run_at => clock_timestamp() + interval '1 hour') AS j5 \gset
SELECT :j1 < :j4 AS ids_increase;

SELECT status, priority, attempts, max_attempts, session_id IS NULL AS unclaimed,
	   created_by = current_user::regrole AS by_me
  FROM distlock.jobs WHERE id = :j1;

-- one claim returns the job as it now is: running, attempts 1, this session
SELECT payload, status, attempts, session_id = :'w1' AS mine, claimed_at IS NOT NULL AS stamped
  FROM distlock.claim('mail', :'w1');
-- a batch continues in claim order; the delayed job is not due
SELECT payload FROM distlock.claim('mail', :'w2', 10);
SELECT count(*) FROM distlock.claim('mail', :'w2', 10);
SELECT payload, status FROM distlock.jobs WHERE id = :j5;

-- other queues are untouched
SELECT distlock.enqueue('sms', '{}') AS s1 \gset
SELECT count(*) FROM distlock.claim('nothing here', :'w1');

-- complete: only the claiming session, only once
SELECT distlock.complete(:j2, :'w2');
SELECT distlock.complete(:j2, :'w1', '{"sent": true}');
SELECT distlock.complete(:j2, :'w1');
SELECT status, result, finished_at IS NOT NULL AS finished FROM distlock.jobs WHERE id = :j2;
SELECT distlock.complete(:j3, :'w2', '{"sent": true}');
SELECT distlock.complete(:j1, :'w2');
SELECT distlock.complete(:j4, :'w2');
SELECT distlock.complete(:j5, :'w1');
SELECT distlock.complete(9999999, :'w1');

-- an acknowledgement commits with the worker's own writes, or neither does
CREATE TABLE effects (job bigint PRIMARY KEY);
SELECT id AS j6 FROM distlock.claim('sms', :'w1') \gset
BEGIN;
INSERT INTO effects VALUES (:j6);
SELECT distlock.complete(:j6, :'w1');
ROLLBACK;
SELECT status FROM distlock.jobs WHERE id = :j6;
SELECT count(*) FROM effects;
BEGIN;
INSERT INTO effects VALUES (:j6);
SELECT distlock.complete(:j6, :'w1');
COMMIT;
SELECT status FROM distlock.jobs WHERE id = :j6;
SELECT count(*) FROM effects;

-- cancel: pending or running jobs; later acknowledgements are refused
SELECT distlock.enqueue('cancel', '{}') AS c1 \gset
SELECT distlock.enqueue('cancel', '{}') AS c2 \gset
SELECT distlock.cancel(:c1);
SELECT distlock.cancel(:c1);
SELECT id = :c2 AS got_c2 FROM distlock.claim('cancel', :'w1', 5);
SELECT distlock.cancel(:c2);
SELECT distlock.complete(:c2, :'w1');
SELECT distlock.fail(:c2, :'w1');
SELECT status, count(*) FROM distlock.jobs WHERE queue = 'cancel' GROUP BY 1;
SELECT distlock.cancel(:j2);
SELECT distlock.cancel(9999999);

-- dedup: while a job with the key is pending or running, enqueue returns it
SELECT distlock.enqueue('dedup', '{"v": 1}', dedup_key => 'k') AS d1 \gset
SELECT distlock.enqueue('dedup', '{"v": 2}', dedup_key => 'k') = :d1 AS same_job;
SELECT distlock.enqueue('other', '{"v": 3}', dedup_key => 'k') <> :d1 AS other_queue;
SELECT count(*), min(payload::text) FROM distlock.jobs WHERE queue = 'dedup';
SELECT count(*) FROM distlock.claim('dedup', :'w1');
SELECT distlock.enqueue('dedup', '{"v": 4}', dedup_key => 'k') = :d1 AS same_while_running;
SELECT distlock.complete(:d1, :'w1');
SELECT distlock.enqueue('dedup', '{"v": 5}', dedup_key => 'k') > :d1 AS new_after_finish;

-- session_close hands the session's running jobs back at once
SELECT distlock.enqueue('close', '{}') AS k1 \gset
SELECT count(*) FROM distlock.claim('close', :'w2');
SELECT distlock.session_close(:'w2');
SELECT status, session_id IS NULL AS unclaimed, last_error, attempts
  FROM distlock.jobs WHERE id = :k1;
SELECT distlock.complete(:k1, :'w2');
SELECT id = :k1 AS reclaimed, attempts FROM distlock.claim('close', :'w1');

-- an expired session's jobs are claimable at once, without reap(), and its
-- acknowledgement is refused
SELECT distlock.session_open('100 milliseconds') AS w3 \gset
SELECT distlock.enqueue('expire', '{}') AS e1 \gset
SELECT count(*) FROM distlock.claim('expire', :'w3');
SELECT pg_sleep(0.2);
SELECT distlock.complete(:e1, :'w3');
SELECT id = :e1 AS reclaimed, attempts FROM distlock.claim('expire', :'w1');
SELECT count(*) FROM distlock.sessions WHERE id = :'w3';
SELECT distlock.complete(:e1, :'w3');
SELECT distlock.complete(:e1, :'w1');

-- claiming through a session that is not live is an error
SELECT attempt(format('distlock.claim(%L, %L)', 'expire', :'w3'));
SELECT distlock.session_open('100 milliseconds') AS w4 \gset
SELECT pg_sleep(0.2);
SELECT attempt(format('distlock.claim(%L, %L)', 'expire', :'w4'));

SELECT queue, pending, running, completed, failed, cancelled,
	   oldest_pending_age IS NOT NULL AS has_due_pending
  FROM distlock.queue_stats ORDER BY queue;

SELECT distlock.session_close(:'w1');
SELECT distlock.reap();
