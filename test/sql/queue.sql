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

-- complete_and_claim: acknowledge the job in hand and claim the next of its
-- queue, in one call and one transaction
SELECT distlock.session_open('1 minute', 'loop') AS w5 \gset
SELECT distlock.session_open('1 minute', 'other') AS w6 \gset
SELECT count(distlock.enqueue('loop', jsonb_build_object('n', n), priority => -n))
  FROM generate_series(1, 4) n;
SELECT min(id) AS l1 FROM distlock.jobs WHERE queue = 'loop' \gset
SELECT distlock.enqueue('loop other queue', '{}') AS lo \gset
SELECT id = :l1 AS first FROM distlock.claim('loop', :'w5');
-- the next job of the same queue, as claim() returns it
SELECT id = :l1 + 1 AS next, payload, status, attempts, session_id = :'w5' AS mine
  FROM distlock.complete_and_claim(:l1, :'w5', '{"done": 1}');
SELECT status, result FROM distlock.jobs WHERE id = :l1;
-- max_jobs: a batch, in claim order
SELECT id - :l1 AS n FROM distlock.complete_and_claim(:l1 + 1, :'w5', max_jobs => 5);
-- the queue is drained: the acknowledgement stands, nothing is claimed
SELECT count(*) FROM distlock.complete_and_claim(:l1 + 2, :'w5');
SELECT count(*) FROM distlock.complete_and_claim(:l1 + 3, :'w5');
SELECT status, count(*) FROM distlock.jobs WHERE queue = 'loop' GROUP BY 1;
SELECT status FROM distlock.jobs WHERE id = :lo;
-- a refused acknowledgement raises 55000 and claims nothing: done already,
-- another session's job, a pending job; an unknown job raises 42704
SELECT attempt(format('distlock.complete_and_claim(%s, %L)', :l1, :'w5'));
SELECT id AS lo_claimed FROM distlock.claim('loop other queue', :'w6') \gset
SELECT attempt(format('distlock.complete_and_claim(%s, %L)', :lo, :'w5'));
SELECT distlock.enqueue('loop', '{}') AS l5 \gset
SELECT attempt(format('distlock.complete_and_claim(%s, %L)', :l5, :'w5'));
SELECT status, session_id IS NULL AS unclaimed FROM distlock.jobs WHERE id = :l5;
SELECT attempt(format('distlock.complete_and_claim(%s, %L)', 9999999, :'w5'));
-- the refusal rolls back the worker's effects in the same transaction
\set VERBOSITY sqlstate
BEGIN;
INSERT INTO effects VALUES (:l1);
SELECT count(*) FROM distlock.complete_and_claim(:l1, :'w5');
COMMIT;
\set VERBOSITY default
SELECT count(*) FROM effects WHERE job = :l1;
-- accepted, the effects commit with the acknowledgement and the new claim
BEGIN;
INSERT INTO effects VALUES (:lo);
SELECT count(*) AS claimed_from_other_queues
  FROM distlock.complete_and_claim(:lo, :'w6', max_jobs => 1);
COMMIT;
SELECT count(*) FROM effects WHERE job = :lo;
SELECT id, status FROM distlock.jobs WHERE id IN (:lo, :l5) ORDER BY id;
-- through a session that is not live: 55000 (expired) or 42704 (closed)
SELECT distlock.session_open('100 milliseconds', 'brief') AS w7 \gset
SELECT distlock.enqueue('loop', '{}') AS l6 \gset
SELECT count(*) FROM distlock.claim('loop', :'w7');
SELECT pg_sleep(0.2);
SELECT attempt(format('distlock.complete_and_claim(%s, %L)', :l6, :'w7'));
SELECT distlock.session_close(:'w6');
SELECT attempt(format('distlock.complete_and_claim(%s, %L)', :l5, :'w6'));
SELECT distlock.session_close(:'w5');

-- complete_batch: acknowledge a batch in one call; the ids acknowledged
-- come back, the others are left as they are
SELECT distlock.session_open('1 minute', 'batch') AS w8 \gset
SELECT distlock.session_open('1 minute', 'batch other') AS w9 \gset
SELECT count(distlock.enqueue('batch', jsonb_build_object('n', n)))
  FROM generate_series(1, 5) n;
SELECT array_agg(id ORDER BY id) AS b3 FROM distlock.claim('batch', :'w8', 3) \gset
SELECT array_agg(id ORDER BY id) AS b2 FROM distlock.claim('batch', :'w9', 2) \gset
-- one of w9's jobs, and one twice: only w8's running jobs are acknowledged
SELECT array_position(:'b3'::bigint[], id) AS acked
  FROM distlock.complete_batch(:'b3'::bigint[] || (:'b2'::bigint[])[1:1] || (:'b3'::bigint[])[1:1],
							   :'w8', '{"ok": true}') AS a(id);
-- in a select list too
SELECT distlock.complete_batch('{}', :'w8');
SELECT status, result, count(*) FROM distlock.jobs WHERE queue = 'batch'
 GROUP BY 1, 2 ORDER BY 1;
-- again: nothing left to acknowledge
SELECT count(*) FROM distlock.complete_batch(:'b3'::bigint[], :'w8');
SELECT count(*) FROM distlock.complete_batch('{}', :'w8');
-- an id that is no job raises 42704 and acknowledges nothing
SELECT attempt(format('distlock.complete_batch(%L, %L)', :'b2'::bigint[] || 9999999::bigint, :'w9'));
SELECT count(*) FROM distlock.jobs WHERE id = ANY (:'b2') AND status = 'running';
-- a dead session acknowledges nothing
SELECT distlock.session_close(:'w8');
SELECT count(*) FROM distlock.complete_batch(:'b2'::bigint[], :'w8');
SELECT count(*) FROM distlock.complete_batch(:'b2'::bigint[], :'w9');
SELECT distlock.session_close(:'w9');

-- complete_batch_and_claim: a batch acknowledged whole, and the next one
-- claimed from its queue, in one call and one transaction
CREATE TABLE batch_effects (job bigint);
SELECT distlock.session_open('1 minute', 'batch loop') AS w10 \gset
SELECT distlock.session_open('1 minute', 'batch loop other') AS w11 \gset
SELECT count(distlock.enqueue('bloop', jsonb_build_object('n', n)))
  FROM generate_series(1, 10) n;
SELECT array_agg(id ORDER BY id) AS c2 FROM distlock.claim('bloop', :'w10', 2) \gset
SELECT array_agg(id ORDER BY id) AS o1 FROM distlock.claim('bloop', :'w11', 1) \gset
-- accepted: the effects commit, as many are claimed as were acknowledged
-- (a duplicate counts once), and they are the next in claim order
BEGIN;
INSERT INTO batch_effects SELECT unnest(:'c2'::bigint[]);
SELECT array_agg(id ORDER BY id) AS c2b, count(*) AS claimed, min(status::text) AS status,
	   min(id) > (SELECT max(x) FROM unnest(:'o1'::bigint[]) x) AS next_in_order
  FROM distlock.complete_batch_and_claim(:'c2'::bigint[] || (:'c2'::bigint[])[1:1], :'w10', '{"ok": 1}') \gset
COMMIT;
SELECT :claimed AS claimed, :'status' AS status, :'next_in_order' AS next_in_order;
SELECT count(*) FROM batch_effects;
SELECT status, result, count(*) FROM distlock.jobs WHERE id = ANY (:'c2') GROUP BY 1, 2;
-- max_jobs
SELECT count(*) AS claimed_3 FROM distlock.complete_batch_and_claim(:'c2b'::bigint[], :'w10', max_jobs => 3);
-- refused: one job of the batch is another session's: 55000, and the
-- worker's effects and the other acknowledgements roll back with it
SELECT array_agg(id ORDER BY id) AS c1 FROM distlock.jobs
 WHERE queue = 'bloop' AND status = 'running' AND session_id = :'w10' \gset
BEGIN;
INSERT INTO batch_effects SELECT unnest(:'c1'::bigint[]);
\set VERBOSITY sqlstate
SELECT count(*) FROM distlock.complete_batch_and_claim(:'c1'::bigint[] || :'o1'::bigint[], :'w10');
\set VERBOSITY default
COMMIT;
SELECT count(*) FROM batch_effects;
SELECT count(*) AS running_still FROM distlock.jobs WHERE id = ANY (:'c1') AND status = 'running';
SELECT attempt(format('distlock.complete_batch_and_claim(%L, %L)', :'c1'::bigint[] || :'o1'::bigint[], :'w10'));
-- an id that is no job: 42704; no ids: 22023; jobs of two queues: 22023
SELECT attempt(format('distlock.complete_batch_and_claim(%L, %L)', :'c1'::bigint[] || 9999999::bigint, :'w10'));
SELECT attempt(format('distlock.complete_batch_and_claim(%L, %L)', '{}', :'w10'));
SELECT distlock.enqueue('bloop2', '{}') AS q2 \gset
SELECT count(*) FROM distlock.claim('bloop2', :'w10');
SELECT attempt(format('distlock.complete_batch_and_claim(%L, %L)', :'c1'::bigint[] || :q2::bigint, :'w10'));
-- a refused job of the batch is reported before the second queue
SELECT attempt(format('distlock.complete_batch_and_claim(%L, %L)', :'c1'::bigint[] || :'o1'::bigint[] || :q2::bigint, :'w10'));
SELECT count(*) AS running_still FROM distlock.jobs WHERE (id = ANY (:'c1') OR id = :q2) AND status = 'running';
-- a session that is not live: 42704 once closed
SELECT distlock.session_close(:'w10');
SELECT attempt(format('distlock.complete_batch_and_claim(%L, %L)', :'c1', :'w10'));
SELECT distlock.session_close(:'w11');
DROP TABLE batch_effects;

