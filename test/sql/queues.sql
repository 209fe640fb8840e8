--
-- queues: a queue belongs to a role; other roles enqueue, claim and manage
-- in it only as its owner granted (grant_queue), so no role can flood
-- another's queue, squat on its dedup keys or take its name first
--

CREATE ROLE q_owner;
CREATE ROLE q_producer;
CREATE ROLE q_worker;
CREATE ROLE q_ops;
CREATE ROLE q_stranger;
CREATE ROLE q_workers;			-- a group: its members claim as it does
GRANT q_workers TO q_worker;
GRANT USAGE ON SCHEMA distlock TO q_owner, q_producer, q_worker, q_ops,
	q_stranger, q_workers;

-- a stranger can neither put jobs in q_owner's queue (flooding) nor hold
-- one of its dedup keys (squatting): both refused before anything is read
SET ROLE q_stranger;
SELECT attempt('distlock.enqueue(''orders'', ''{}'', priority => 100, owner => ''q_owner'')');
SELECT attempt('distlock.enqueue(''orders'', ''{}'', run_at => ''294000-01-01'', dedup_key => ''order-42'', owner => ''q_owner'')');
-- its own queue of the same name is its own: it holds nothing of q_owner's
SELECT distlock.enqueue('orders', '{"junk": 1}', priority => 100,
						dedup_key => 'order-42') IS NOT NULL AS own_queue;
SELECT distlock.enqueue('orders', '{"junk": 2}', run_at => '294000-01-01',
						priority => 100) IS NOT NULL AS own_queue;
RESET ROLE;

-- so the owner's key is free, and its claim takes its own job first
SET ROLE q_owner;
SELECT distlock.session_open('1 hour', 'owner') AS so \gset
SELECT distlock.enqueue('orders', '{"n": 1}', dedup_key => 'order-42') AS j1 \gset
SELECT payload FROM distlock.claim('orders', :'so');
SELECT distlock.complete(:j1, :'so');
-- nobody else may grant on the queue, and bad privileges are named
SET ROLE q_stranger;
SELECT attempt('distlock.grant_queue(''orders'', ''enqueue'', ''q_stranger'', owner => ''q_owner'')');
SET ROLE q_owner;
SELECT attempt('distlock.grant_queue(''orders'', ''read'', ''q_producer'')');
SELECT attempt('distlock.grant_queue(''orders'', '''', ''q_producer'')');
SELECT attempt('distlock.grant_queue(''orders'', ''enqueue'', 12345::oid::regrole)');
SELECT attempt('distlock.enqueue(''orders'', ''{}'', owner => 12345::oid::regrole)');
-- the owner grants: a producer enqueues, a group of workers claims, ops
-- manage
SELECT distlock.grant_queue('orders', 'enqueue', 'q_producer');
SELECT distlock.grant_queue('orders', 'Claim', 'q_workers');
SELECT distlock.grant_queue('orders', ' manage , claim ', 'q_ops');
SELECT owner, queue, grantee, enqueue, claim, manage
  FROM distlock.queue_grants ORDER BY grantee::text;
SELECT r, p, distlock.has_queue_privilege(r::regrole, 'orders', p, 'q_owner')
  FROM unnest(ARRAY['q_owner', 'q_producer', 'q_worker', 'q_ops', 'q_stranger']) r,
	   unnest(ARRAY['enqueue', 'claim', 'manage']) p
 ORDER BY r, p;
RESET ROLE;
-- a query the planner may run in parallel still asks (it is parallel
-- unsafe: it reads the latest grants and sets its own settings, neither
-- of which a parallel query may)
SELECT set_config(CASE WHEN current_setting('server_version_num')::int >= 160000
				  THEN 'debug_parallel_query' ELSE 'force_parallel_mode' END,
				  'on', false) AS parallel;
SET ROLE q_stranger;
SELECT distlock.has_queue_privilege('q_worker', 'orders', 'claim', 'q_owner');
RESET ROLE;
SELECT set_config(CASE WHEN current_setting('server_version_num')::int >= 160000
				  THEN 'debug_parallel_query' ELSE 'force_parallel_mode' END,
				  'off', false) AS parallel;

-- the producer enqueues into the owner's queue; dedup keys are the
-- queue's, shared with the owner's jobs, but another producer's job is
-- not shown to it
SET ROLE q_producer;
SELECT distlock.enqueue('orders', '{"n": 2}', owner => 'q_owner') AS j2 \gset
SELECT distlock.enqueue('orders', '{"n": 3}', dedup_key => 'p-1', owner => 'q_owner') AS j3 \gset
SELECT distlock.enqueue('orders', '{"n": 3}', dedup_key => 'p-1', owner => 'q_owner') = :j3 AS deduplicated;
RESET ROLE;
SET ROLE q_owner;
SELECT distlock.enqueue('orders', '{"n": 4}', dedup_key => 'o-1') AS j4 \gset
RESET ROLE;
SET ROLE q_producer;
SELECT attempt('distlock.enqueue(''orders'', ''{}'', dedup_key => ''o-1'', owner => ''q_owner'')');
-- the owner sees every job of its queue: its enqueue returns the
-- producer's job that holds the key
SET ROLE q_owner;
SELECT distlock.enqueue('orders', '{}', dedup_key => 'p-1') = :j3 AS owner_sees_it;
SET ROLE q_producer;
-- but it may not claim, and its own 'orders' queue is empty
SELECT distlock.session_open('1 hour', 'producer') AS sp \gset
SELECT attempt(format('distlock.claim(%L, %L, owner => %L)', 'orders', :'sp', 'q_owner'));
SELECT count(*) AS claimed FROM distlock.claim('orders', :'sp');
SELECT distlock.session_close(:'sp');
RESET ROLE;

-- a member of the workers' group claims whoever enqueued, in claim order
SET ROLE q_worker;
SELECT distlock.session_open('1 hour', 'worker') AS sw \gset
SELECT payload, created_by, queue_owner
  FROM distlock.claim('orders', :'sw', 2, owner => 'q_owner');
-- the producer cancels its own jobs while pending, not once claimed (a
-- producer's open transaction must not hold up the worker's acknowledgement)
SET ROLE q_producer;
SELECT distlock.enqueue('orders', '{"n": 9}', owner => 'q_owner') AS j9 \gset
SELECT distlock.cancel(:j9) AS cancelled_pending;
SELECT distlock.cancel(:j3) AS cancelled_running;
RESET ROLE;
SELECT status FROM distlock.jobs WHERE id = :j3;
SET ROLE q_worker;
-- it sees those jobs: an acknowledgement that changes nothing is false
SELECT distlock.complete(:j2, :'sw') AS first, distlock.complete(:j2, :'sw') AS again;
-- complete_and_claim stays in the owner's queue
SELECT payload FROM distlock.complete_and_claim(:j3, :'sw');
-- and may not cancel another role's job in it (not a manager)
SELECT attempt(format('distlock.cancel(%s)', :j4));
SELECT attempt(format('distlock.cancel_jobs(%L, %L)', 'orders', 'q_owner'));
SELECT queue, queue_owner, pending, running, completed FROM distlock.queue_stats;
RESET ROLE;

-- so does complete_batch_and_claim: a batch of the owner's queue, and the
-- next batch from it
SET ROLE q_owner;
SELECT distlock.enqueue('orders', '{"n": 6}') AS j6 \gset
SELECT distlock.enqueue('orders', '{"n": 7}') AS j7 \gset
SELECT distlock.enqueue('orders', '{"n": 8}') AS j8 \gset
SET ROLE q_worker;
SELECT payload, queue_owner
  FROM distlock.complete_batch_and_claim(ARRAY[:j4], :'sw', max_jobs => 3)
  ORDER BY id;
RESET ROLE;

-- revoked, the worker's next claim is refused and its complete_and_claim,
-- complete_batch_and_claim and complete_and_claim_wait acknowledge and
-- claim nothing, with a job pending (the last without waiting); its
-- acknowledgements still count
SET ROLE q_owner;
SELECT distlock.revoke_queue('orders', 'claim', 'q_workers');
SELECT count(*) AS grants_left FROM distlock.queue_grants WHERE grantee = 'q_workers'::regrole;
SELECT distlock.enqueue('orders', '{"n": 5}') AS j5 \gset
RESET ROLE;
SET ROLE q_worker;
SELECT attempt(format('distlock.claim(%L, %L, owner => %L)', 'orders', :'sw', 'q_owner'));
SELECT count(*) AS claimed FROM distlock.complete_and_claim(:j6, :'sw');
SELECT count(*) AS claimed FROM distlock.complete_batch_and_claim(ARRAY[:j7], :'sw');
CALL distlock.complete_and_claim_wait(:j8, :'sw', NULL, 1, '30 s');
SELECT status FROM distlock.claim('orders', :'sw');
SELECT distlock.session_close(:'sw');
RESET ROLE;
SELECT payload, status FROM distlock.jobs WHERE id IN (:j4, :j5, :j6, :j7, :j8)
  ORDER BY id;

-- ops manage: cancel one job, then every unfinished job of the queue
SET ROLE q_ops;
SELECT attempt('distlock.enqueue(''orders'', ''{}'', owner => ''q_owner'')');
SELECT distlock.cancel(:j5) AS cancelled;
SET ROLE q_owner;
SELECT count(distlock.enqueue('orders', '{}')) FROM generate_series(1, 3);
SET ROLE q_ops;
SELECT distlock.cancel_jobs('orders', 'q_owner') AS cancelled;
SELECT distlock.cancel_jobs('orders', 'q_owner') AS cancelled_again;
SELECT queue, queue_owner, pending, running, completed, cancelled
  FROM distlock.queue_stats ORDER BY queue_owner::text;
SET ROLE q_stranger;
SELECT attempt('distlock.cancel_jobs(''orders'', ''q_owner'')');
-- a stranger sees only its own queue, and none of q_owner's jobs
SELECT queue, queue_owner, pending FROM distlock.queue_stats;
SELECT replace(attempt(format('distlock.cancel(%s)', :j5)), :'j5', '<j5>');
RESET ROLE;

-- drop_owned(q_owner) deletes its queue's jobs, whoever enqueued them, and
-- the grants it gave
SELECT * FROM distlock.drop_owned('q_owner');
SELECT count(*) AS jobs_left FROM distlock.jobs WHERE queue_owner = 'q_owner'::regrole;
SELECT count(*) AS grants_left FROM distlock.queue_grants;

-- reassign_owned moves a queue with its jobs and the grants it gave,
-- merging a grant into the receiving role's grant to the same grantee
SET ROLE q_stranger;
SELECT distlock.grant_queue('orders', 'claim', 'q_workers');
SELECT distlock.grant_queue('orders', 'enqueue', 'q_ops');
SET ROLE q_owner;
SELECT distlock.grant_queue('orders', 'manage', 'q_ops');
RESET ROLE;
SELECT * FROM distlock.reassign_owned('q_stranger', 'q_owner');
SELECT queue, queue_owner, created_by, count(*) FROM distlock.jobs
 WHERE queue = 'orders' GROUP BY 1, 2, 3;
SELECT owner, queue, grantee, enqueue, claim, manage
  FROM distlock.queue_grants ORDER BY grantee::text;
SELECT * FROM distlock.drop_owned('q_owner');

-- two owners' queues of one name are two queues: claiming in one passes
-- over nothing of the other's (the stranger's job here is the older, in
-- the same priority), and a batch holding a job of each is of more than
-- one queue (22023), its acknowledgements undone
SET ROLE q_stranger;
SELECT distlock.enqueue('twin', '{"of": "stranger"}') AS t1 \gset
SELECT distlock.grant_queue('twin', 'claim', 'q_workers');
SET ROLE q_owner;
SELECT distlock.enqueue('twin', '{"of": "owner"}') AS t2 \gset
SELECT distlock.grant_queue('twin', 'claim', 'q_workers');
SET ROLE q_worker;
SELECT distlock.session_open('1 hour', 'twins') AS st \gset
SELECT payload FROM distlock.claim('twin', :'st', owner => 'q_owner');
SELECT payload FROM distlock.claim('twin', :'st', owner => 'q_stranger');
SELECT attempt(format('distlock.complete_batch_and_claim(ARRAY[%s, %s], %L)',
					  :t1, :t2, :'st'));
SELECT count(*) AS acknowledged
  FROM distlock.complete_batch(ARRAY[:t1, :t2], :'st');
SELECT distlock.session_close(:'st');
RESET ROLE;
SELECT jobs, queue_grants FROM distlock.drop_owned('q_owner');
SELECT jobs, queue_grants FROM distlock.drop_owned('q_stranger');

REVOKE USAGE ON SCHEMA distlock FROM q_owner, q_producer, q_worker, q_ops,
	q_stranger, q_workers;
DROP ROLE q_owner, q_producer, q_worker, q_ops, q_stranger, q_workers;
