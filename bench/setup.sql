-- bench/setup.sql -- the benchmark database: distlock, and the tables of
-- the hand-written patterns it replaces (the baselines), owned by an
-- ordinary application role "app", as an application would have them.
--
-- Run once per cluster by bench/bench.py as a superuser, with psql variable
-- "pgq" set to 1 when PgQ (postgresql-15-pgq3) is installed.

CREATE ROLE app LOGIN;
CREATE EXTENSION distlock;
-- WAL per operation is read with pg_walinspect (record bytes and full-page
-- image bytes apart).
CREATE EXTENSION pg_walinspect;
GRANT USAGE ON SCHEMA distlock TO app;
GRANT CREATE ON SCHEMA public TO app;

\if :pgq
CREATE EXTENSION pgq;
GRANT pgq_reader, pgq_writer TO app;
\endif

-- The session id pgbench client n uses (distlock and the heartbeat baseline
-- alike), so that scripts need no lookup.
CREATE FUNCTION bench_sid(n integer) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN ('00000000-0000-4000-8000-' || lpad(n::text, 12, '0'))::uuid;

SET ROLE app;

-- Exclusive-job lease, the seeds' upsert: take the lease if it is free,
-- expired or already ours; release with an owner-checked DELETE.
CREATE TABLE job_locks
(
	job_id			text PRIMARY KEY,
	job_instance_id text NOT NULL,
	lock_expires_at timestamptz NOT NULL
);

-- Timeout lock, the seeds' UPDATE ... WHERE ts + timeout < now(): one row
-- per name, created beforehand.
CREATE TABLE timeout_locks
(
	name		text PRIMARY KEY,
	holder		text,
	ts			timestamptz,
	timeout		interval NOT NULL DEFAULT '30 seconds'
);
INSERT INTO timeout_locks (name)
SELECT 'lock-' || g FROM generate_series(1, 10000) g
UNION ALL SELECT 'hot';

-- Heartbeat baseline: one row per worker, updated in place.
CREATE TABLE worker_sessions
(
	id				uuid PRIMARY KEY,
	heartbeated_at	timestamptz NOT NULL
);
INSERT INTO worker_sessions
SELECT bench_sid(n), now() FROM generate_series(0, 15) n;

-- The floor of a cycle of durable transactions (floor_commit.sql): one
-- row per pgbench client, updated in place.
CREATE TABLE floor_rows
(
	id			integer PRIMARY KEY,
	n			bigint NOT NULL DEFAULT 0
);
INSERT INTO floor_rows (id) SELECT generate_series(0, 1023);

-- The SKIP LOCKED queue: the seeds' state-transition table with named
-- queues, priorities and retries, and a partial index on pending tasks in
-- claim order.
CREATE TYPE task_state AS ENUM ('pending', 'running', 'completed', 'failed');
CREATE TABLE tasks
(
	id			bigserial PRIMARY KEY,
	queue		text NOT NULL,
	payload		jsonb NOT NULL,
	state		task_state NOT NULL DEFAULT 'pending',
	priority	integer NOT NULL DEFAULT 0,
	run_at		timestamptz NOT NULL DEFAULT now(),
	attempts	integer NOT NULL DEFAULT 0,
	worker		text,
	finished_at timestamptz
);
CREATE INDEX tasks_pending_idx ON tasks (queue, priority DESC, run_at, id)
	WHERE state = 'pending';

-- The advisory-lock worker's job table: an enum status and a partial index
-- on the pending jobs.
CREATE TYPE report_status AS ENUM ('pending', 'running', 'completed');
CREATE TABLE reports
(
	id			bigserial PRIMARY KEY,
	status		report_status NOT NULL DEFAULT 'pending',
	payload		jsonb NOT NULL
);
CREATE INDEX reports_pending_idx ON reports (id) WHERE status = 'pending';

-- distlock: a session per pgbench client, opened by app like any worker's
-- (renamed to bench_sid(n) afterwards, which only the benchmark does), and
-- every lock name used once, so that lock rows exist as in a steady state.
CREATE TEMP TABLE opened AS
SELECT n, distlock.session_open('1 day', 'bench-' || n) AS id
  FROM generate_series(0, 15) n;
RESET ROLE;
UPDATE distlock.sessions s SET id = bench_sid(o.n) FROM opened o WHERE s.id = o.id;
SET ROLE app;
SELECT count(*) FILTER (WHERE distlock.try_acquire(name, 'setup', '1 hour') IS NOT NULL
						  AND distlock.release(name, 'setup')) AS lock_names
  FROM timeout_locks;
RESET ROLE;
