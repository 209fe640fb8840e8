--
-- patterns: the README's "From the patterns you know", run.  Each part
-- runs the hand-written SQL the README shows under "you know" and the
-- distlock calls it shows beside it, as printed there (keep the two in
-- step), and checks that both do what the README says.
--

-- a fresh install, so that tokens and job ids are the README's
DROP EXTENSION distlock;
CREATE EXTENSION distlock;

--
-- Mutex
--
CREATE TABLE mutexes (name text PRIMARY KEY, holder text, expires_at timestamptz);
INSERT INTO mutexes (name) VALUES ('billing');

-- you know
UPDATE mutexes SET holder = 'host-a:1234'
 WHERE name = 'billing' AND holder IS NULL RETURNING name;   -- a row: yours
UPDATE mutexes SET holder = 'host-b:5678'
 WHERE name = 'billing' AND holder IS NULL RETURNING name;   -- no row: taken
UPDATE mutexes SET holder = NULL
 WHERE name = 'billing' AND holder = 'host-a:1234';
SELECT holder FROM mutexes;

-- distlock
SELECT distlock.try_acquire('billing', 'host-a:1234', ttl => NULL);   -- 1, a fencing token
SELECT distlock.try_acquire('billing', 'host-b:5678', ttl => NULL);   -- NULL: taken
SELECT distlock.release('billing', 'host-a:1234');

--
-- Timeout lock
--

-- you know
UPDATE mutexes SET holder = 'host-a:1234', expires_at = now() + interval '30 seconds'
 WHERE name = 'billing' AND (holder IS NULL OR expires_at < now()) RETURNING name;
UPDATE mutexes SET holder = 'host-b:5678', expires_at = now() + interval '30 seconds'
 WHERE name = 'billing' AND (holder IS NULL OR expires_at < now()) RETURNING name;   -- none

-- distlock
SELECT distlock.try_acquire('billing', 'host-a:1234', '30 seconds');   -- 2
SELECT distlock.try_acquire('billing', 'host-b:5678', '30 seconds');   -- NULL until it expires
SELECT distlock.renew('billing', 'host-a:1234', '30 seconds');

SELECT name, owner, token, remaining > '29 seconds' AS remaining
  FROM distlock.active_locks;

--
-- State transitions with retries and named queues
--
CREATE TABLE tasks
(
	id			bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	queue		text NOT NULL,
	payload		jsonb NOT NULL,
	state		text NOT NULL DEFAULT 'pending',
	worker		text,
	attempts	integer NOT NULL DEFAULT 0,
	run_at		timestamptz NOT NULL DEFAULT now()
);
INSERT INTO tasks (queue, payload) VALUES ('emails', '{"to": "ada@example.com"}');

-- you know
UPDATE tasks SET state = 'running', worker = 'host-a:1234', attempts = attempts + 1
 WHERE id = (SELECT id FROM tasks
			  WHERE queue = 'emails' AND state = 'pending' AND run_at <= now()
			  ORDER BY run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id, payload;
UPDATE tasks SET state = CASE WHEN attempts < 5 THEN 'pending' ELSE 'failed' END,
				 worker = NULL, run_at = now() + interval '1 minute'
 WHERE id = 1 AND state = 'running' AND worker = 'host-a:1234';
SELECT id, state, worker, attempts, run_at > now() AS later FROM tasks;

-- distlock
SELECT distlock.session_open('30 seconds', 'host-a:1234') AS sid \gset
SELECT distlock.enqueue('emails', '{"to": "ada@example.com"}', max_attempts => 5);   -- job 1
SELECT id, payload FROM distlock.claim('emails', :'sid');
SELECT distlock.fail(1, :'sid', 'smtp timeout', retry_in => '1 minute');
-- ... a minute later, claimed again:
UPDATE distlock.jobs SET run_at = now() WHERE id = 1;   -- (the test does not wait)
SELECT id, attempts FROM distlock.claim('emails', :'sid');
SELECT distlock.complete(1, :'sid');
SELECT distlock.complete(1, :'sid');   -- false: acknowledged once only
SELECT queue, pending, running, completed FROM distlock.queue_stats;

--
-- Exclusive scheduled job
--
CREATE TABLE job_locks (name text PRIMARY KEY, locked_by text NOT NULL,
						lock_until timestamptz NOT NULL);

-- you know
INSERT INTO job_locks (name, locked_by, lock_until)
VALUES ('hourly-report', 'host-a', now() + interval '10 minutes')
ON CONFLICT (name) DO UPDATE
   SET locked_by = excluded.locked_by, lock_until = excluded.lock_until
 WHERE job_locks.lock_until <= now() OR job_locks.locked_by = excluded.locked_by
RETURNING name, locked_by;
INSERT INTO job_locks (name, locked_by, lock_until)
VALUES ('hourly-report', 'host-b', now() + interval '10 minutes')
ON CONFLICT (name) DO UPDATE
   SET locked_by = excluded.locked_by, lock_until = excluded.lock_until
 WHERE job_locks.lock_until <= now() OR job_locks.locked_by = excluded.locked_by
RETURNING name, locked_by;   -- no row: host-a has it
UPDATE job_locks SET lock_until = now() + interval '10 minutes'
 WHERE name = 'hourly-report' AND locked_by = 'host-a';
SELECT locked_by, lock_until > now() + interval '9 minutes' AS extended FROM job_locks;

-- distlock
SELECT distlock.try_acquire('hourly-report', 'host-a', '10 minutes',
							min_hold => '50 minutes');   -- 3
SELECT distlock.renew('hourly-report', 'host-a', '10 minutes');
SELECT distlock.release('hourly-report', 'host-a');      -- done early
SELECT distlock.try_acquire('hourly-report', 'host-b', '10 minutes');   -- NULL: held on
SELECT name, owner, token, remaining > '49 minutes' AS held_on
  FROM distlock.active_locks WHERE name = 'hourly-report';

--
-- At most once per interval
--
CREATE TABLE task_runs (name text PRIMARY KEY, last_run timestamptz NOT NULL);
INSERT INTO task_runs VALUES ('FOO', '-infinity');

-- you know
UPDATE task_runs SET last_run = now()
 WHERE name = 'FOO' AND last_run <= now() - interval '1 minute' RETURNING name;   -- run it
UPDATE task_runs SET last_run = now()
 WHERE name = 'FOO' AND last_run <= now() - interval '1 minute' RETURNING name;   -- not yet

-- distlock
SELECT distlock.throttle('FOO', '1 minute');   -- true: run it
SELECT distlock.throttle('FOO', '1 minute');   -- false: not yet
SELECT distlock.throttle('mail-burst', '1 minute', burst => 5);   -- 5 at once, then 1 a minute
SELECT available, next_in > '59 seconds' AS about_a_minute
  FROM distlock.throttle_status('FOO');
SELECT available FROM distlock.throttle_status('mail-burst');

--
-- Advisory-lock job worker
--
CREATE TYPE report_status AS ENUM ('pending', 'running', 'done');
CREATE TABLE reports (id bigint PRIMARY KEY, status report_status NOT NULL DEFAULT 'pending');
CREATE INDEX reports_pending_idx ON reports (id) WHERE status = 'pending';
INSERT INTO reports (id) VALUES (1), (2);

-- you know
SELECT pg_try_advisory_lock(8458036681634828566);   -- Python: struct.unpack('q', sha256(b'hourly_report_generation').digest()[:8])[0]
SELECT pg_try_advisory_lock(id) AS locked, id FROM reports WHERE status = 'pending' ORDER BY id LIMIT 1;
SELECT status = 'pending' AS still_pending FROM reports WHERE id = 1;   -- the double-check
SELECT objid, granted FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() ORDER BY objid;
SELECT pg_advisory_unlock_all();

-- distlock
SELECT pg_try_advisory_lock(distlock.lock_key('hourly_report_generation'));
SELECT key, granted, pid = pg_backend_pid() AS mine
  FROM distlock.advisory_locks WHERE pid = pg_backend_pid();
SELECT pg_advisory_unlock_all();
-- through a connection pool, a lease instead, and the queue for the jobs
SELECT distlock.try_acquire('hourly_report_generation', 'host-a:1234', '5 minutes');   -- 4
SELECT distlock.enqueue('reports', '{"report": 1}');   -- job 2
SELECT id, payload FROM distlock.claim('reports', :'sid');

--
-- Sessions with exactly-once work items
--
CREATE TABLE worker_sessions (id text PRIMARY KEY, alive_until timestamptz NOT NULL);
CREATE TABLE work_items (id bigint PRIMARY KEY,
						 claimed_by text REFERENCES worker_sessions ON DELETE SET NULL);
INSERT INTO worker_sessions VALUES ('s1', now() + interval '15 seconds');
INSERT INTO work_items VALUES (1);

-- you know
UPDATE worker_sessions SET alive_until = now() + interval '15 seconds' WHERE id = 's1';
DELETE FROM worker_sessions WHERE alive_until < now() RETURNING id;   -- frees their items
UPDATE work_items SET claimed_by = 's1'
 WHERE id = (SELECT id FROM work_items WHERE claimed_by IS NULL
			  ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id;
DELETE FROM work_items w USING worker_sessions s
 WHERE w.id = 1 AND w.claimed_by = 's1'
   AND s.id = 's1' AND s.alive_until > now() RETURNING w.id;   -- a row: done, once
DELETE FROM work_items w USING worker_sessions s
 WHERE w.id = 1 AND w.claimed_by = 's1'
   AND s.id = 's1' AND s.alive_until > now() RETURNING w.id;   -- no row

-- distlock
SELECT distlock.session_open('15 seconds', 'host-a:1234') AS sid \gset
SELECT distlock.heartbeat(:'sid');   -- every few seconds; false: stop, the claims are gone
SELECT distlock.enqueue('items', '{"item": 1}');   -- job 3
SELECT id FROM distlock.claim('items', :'sid');
SELECT distlock.complete(3, :'sid');   -- true: done, once
SELECT distlock.complete(3, :'sid');   -- false
SELECT distlock.session_close(:'sid');

DROP TABLE mutexes, tasks, job_locks, task_runs, reports, work_items, worker_sessions;
DROP TYPE report_status;
