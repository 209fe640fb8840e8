/* distlock/sql/distlock--1.0.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION distlock" to load this file. \quit

-- A plain CREATE SCHEMA fails if the schema exists, so nobody can have
-- planted objects in it before the extension took it over.
CREATE SCHEMA distlock;
COMMENT ON SCHEMA distlock IS 'distlock: leases, sessions and the job queue';

--
-- Fencing tokens come from one sequence, drawn while the lock row is locked,
-- so they increase strictly per lock name in grant order, and a token handed
-- out by a transaction that rolled back is never handed out again.
--
CREATE SEQUENCE distlock.token_seq AS bigint MINVALUE 1 NO CYCLE;

--
-- distlock.sessions: one row per live (or expired but not yet reaped)
-- worker session.  A closed or reaped session's row is deleted, so a session
-- id is either live, expired, or unknown.
--
--	id				the session's identity, presented by any connection
--	owner			free-form label given by the worker (host, pid, ...)
--	info			free-form jsonb given by the worker
--	ttl				how far each heartbeat pushes expires_at
--	created_at		server time of session_open()
--	heartbeat_at	server time of the last successful heartbeat
--	expires_at		the session is dead once the server clock passes this
--	created_by		role that opened the session
--
CREATE TABLE distlock.sessions
(
	id			uuid NOT NULL,
	owner		text,
	info		jsonb,
	ttl			interval NOT NULL,
	created_at	timestamptz NOT NULL,
	heartbeat_at timestamptz NOT NULL,
	expires_at	timestamptz NOT NULL,
	created_by	regrole NOT NULL,
	CONSTRAINT sessions_pkey PRIMARY KEY (id),
	CONSTRAINT sessions_owner_check
		CHECK (pg_catalog.char_length(owner) OPERATOR(pg_catalog.<=) 255)
);

-- Finds expired sessions for reap() and for claim()'s inline reaping.
CREATE INDEX sessions_expires_at_idx ON distlock.sessions (expires_at);

--
-- distlock.locks: one row per lock name ever acquired.  The row outlives
-- release so that the name's fencing history stays with it.
--
--	name			lock name, 1 to 255 characters
--	owner			current holder, NULL when released
--	session_id		session the lease is bound to, or NULL
--	token			fencing token of the current (or last) grant
--	acquired_at		server time of the grant that issued token
--	renewed_at		server time of the last grant, re-entrant acquire or renew
--	expires_at		end of the lease; NULL means "until released"
--	created_by		role that made the current (or last) grant
--
-- A lease blocks other owners while owner is set, expires_at is NULL or in
-- the future, and its session (if any) is live.  Nothing else is needed to
-- free a lock: expiry and session death take effect on the server clock.
--
CREATE TABLE distlock.locks
(
	name		text NOT NULL,
	owner		text,
	session_id	uuid,
	token		bigint NOT NULL,
	acquired_at timestamptz NOT NULL,
	renewed_at	timestamptz NOT NULL,
	expires_at	timestamptz,
	created_by	regrole NOT NULL,
	CONSTRAINT locks_pkey PRIMARY KEY (name),
	CONSTRAINT locks_name_check
		CHECK (pg_catalog.char_length(name) OPERATOR(pg_catalog.>=) 1
			   AND pg_catalog.char_length(name) OPERATOR(pg_catalog.<=) 255),
	CONSTRAINT locks_owner_check
		CHECK (pg_catalog.char_length(owner) OPERATOR(pg_catalog.<=) 255)
);

--
-- distlock.jobs: the queue.  A job moves pending -> running (claimed by a
-- session) -> completed, or back to pending on failure or session death,
-- until max_attempts is spent (failed); cancel() ends it from pending or
-- running.
--
--	id				job id
--	queue			queue name, 1 to 255 characters
--	payload			the job's input
--	status			see distlock.job_status
--	priority		higher is claimed first
--	run_at			not claimed before this server time
--	attempts		number of claims so far
--	max_attempts	claims allowed before the job becomes failed
--	session_id		claiming session while running; last claimer after
--	claimed_at		server time of the last claim
--	finished_at		server time it became completed, failed or cancelled
--	last_error		error text of the last fail()
--	result			result given to complete()
--	dedup_key		while pending or running, unique within its queue
--	created_at		server time of enqueue()
--	created_by		role that enqueued it
--
CREATE TYPE distlock.job_status AS ENUM
	('pending', 'running', 'completed', 'failed', 'cancelled');

CREATE SEQUENCE distlock.jobs_id_seq AS bigint;

CREATE TABLE distlock.jobs
(
	id			bigint NOT NULL
		DEFAULT pg_catalog.nextval('distlock.jobs_id_seq'::pg_catalog.regclass),
	queue		text NOT NULL,
	payload		jsonb NOT NULL,
	status		distlock.job_status NOT NULL,
	priority	integer NOT NULL,
	run_at		timestamptz NOT NULL,
	attempts	integer NOT NULL,
	max_attempts integer NOT NULL,
	session_id	uuid,
	claimed_at	timestamptz,
	finished_at timestamptz,
	last_error	text,
	result		jsonb,
	dedup_key	text,
	created_at	timestamptz NOT NULL,
	created_by	regrole NOT NULL,
	CONSTRAINT jobs_pkey PRIMARY KEY (id),
	CONSTRAINT jobs_queue_check
		CHECK (pg_catalog.char_length(queue) OPERATOR(pg_catalog.>=) 1
			   AND pg_catalog.char_length(queue) OPERATOR(pg_catalog.<=) 255),
	CONSTRAINT jobs_attempts_check
		CHECK (attempts OPERATOR(pg_catalog.>=) 0
			   AND max_attempts OPERATOR(pg_catalog.>=) 1)
);

ALTER SEQUENCE distlock.jobs_id_seq OWNED BY distlock.jobs.id;

-- claim(): due pending jobs of one queue in claim order.
CREATE INDEX jobs_claim_idx ON distlock.jobs
	(queue, priority DESC, run_at, id)
	WHERE status OPERATOR(pg_catalog.=) 'pending'::distlock.job_status;

-- reap() and session_close(): the running jobs of one session.
CREATE INDEX jobs_running_session_idx ON distlock.jobs (session_id)
	WHERE status OPERATOR(pg_catalog.=) 'running'::distlock.job_status;

-- enqueue(): one unfinished job per (queue, dedup_key).
CREATE UNIQUE INDEX jobs_dedup_idx ON distlock.jobs (queue, dedup_key)
	WHERE dedup_key IS NOT NULL
	  AND status OPERATOR(pg_catalog.<=) 'running'::distlock.job_status;

-- pg_dump keeps the rows and the counters; nobody else writes the tables.
SELECT pg_catalog.pg_extension_config_dump('distlock.sessions', '');
SELECT pg_catalog.pg_extension_config_dump('distlock.locks', '');
SELECT pg_catalog.pg_extension_config_dump('distlock.jobs', '');
SELECT pg_catalog.pg_extension_config_dump('distlock.token_seq', '');
SELECT pg_catalog.pg_extension_config_dump('distlock.jobs_id_seq', '');

REVOKE ALL ON ALL TABLES IN SCHEMA distlock FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA distlock FROM PUBLIC;

--
-- Views.  They judge liveness on clock_timestamp(), like the functions.
--
CREATE VIEW distlock.live_sessions AS
SELECT s.id, s.owner, s.info, s.ttl, s.created_at, s.heartbeat_at,
	   s.expires_at,
	   s.expires_at OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp()
		   AS remaining,
	   s.created_by
  FROM distlock.sessions s
 WHERE s.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp();

COMMENT ON VIEW distlock.live_sessions IS
	'sessions that have not expired, with the time they have left';

CREATE VIEW distlock.active_locks AS
SELECT l.name, l.owner, l.session_id, l.token, l.acquired_at, l.renewed_at,
	   l.expires_at,
	   l.expires_at OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp()
		   AS remaining,
	   l.created_by
  FROM distlock.locks l
 WHERE l.owner IS NOT NULL
   AND (l.expires_at IS NULL
		OR l.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp())
   AND (l.session_id IS NULL
		OR EXISTS (SELECT 1 FROM distlock.sessions s
					WHERE s.id OPERATOR(pg_catalog.=) l.session_id
					  AND s.expires_at OPERATOR(pg_catalog.>)
						  pg_catalog.clock_timestamp()));

COMMENT ON VIEW distlock.active_locks IS
	'locks held right now, with the time their lease has left (NULL: until released)';

CREATE VIEW distlock.queue_stats AS
SELECT j.queue,
	   pg_catalog.count(*) FILTER (WHERE j.status OPERATOR(pg_catalog.=) 'pending'::distlock.job_status) AS pending,
	   pg_catalog.count(*) FILTER (WHERE j.status OPERATOR(pg_catalog.=) 'running'::distlock.job_status) AS running,
	   pg_catalog.count(*) FILTER (WHERE j.status OPERATOR(pg_catalog.=) 'completed'::distlock.job_status) AS completed,
	   pg_catalog.count(*) FILTER (WHERE j.status OPERATOR(pg_catalog.=) 'failed'::distlock.job_status) AS failed,
	   pg_catalog.count(*) FILTER (WHERE j.status OPERATOR(pg_catalog.=) 'cancelled'::distlock.job_status) AS cancelled,
	   pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-)
		   pg_catalog.min(j.run_at) FILTER (WHERE j.status OPERATOR(pg_catalog.=) 'pending'::distlock.job_status
			   AND j.run_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp())
		   AS oldest_pending_age
  FROM distlock.jobs j
 GROUP BY j.queue;

COMMENT ON VIEW distlock.queue_stats IS
	'per queue: jobs in each status, and how long the oldest due pending job has waited';

--
-- Leases.  The functions are not STRICT: a NULL where a value is needed is an
-- error (22004), never a silent NULL answer.
--
CREATE FUNCTION distlock.try_acquire(lock_name text, owner text,
									 ttl interval DEFAULT '30 seconds',
									 session_id uuid DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'distlock_try_acquire'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION distlock.try_acquire(text, text, interval, uuid) IS
	'take or re-enter a lease; returns its fencing token, or NULL while another owner holds it';

CREATE FUNCTION distlock.renew(lock_name text, owner text,
							   ttl interval DEFAULT '30 seconds')
RETURNS boolean
AS 'MODULE_PATHNAME', 'distlock_renew'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION distlock.renew(text, text, interval) IS
	'extend a lease to now + ttl if owner still holds it';

CREATE FUNCTION distlock.release(lock_name text, owner text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'distlock_release'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION distlock.release(text, text) IS
	'free a lease held by owner';

CREATE FUNCTION distlock.fence(lock_name text, token bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'distlock_fence'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION distlock.fence(text, bigint) IS
	'raise unless token is the current token of a live lease; keep the lease from changing hands until the transaction ends';

--
-- Sessions.
--
CREATE FUNCTION distlock.session_open(ttl interval DEFAULT '15 seconds',
									  owner text DEFAULT NULL,
									  info jsonb DEFAULT NULL)
RETURNS uuid
AS 'MODULE_PATHNAME', 'distlock_session_open'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION distlock.session_open(interval, text, jsonb) IS
	'open a worker session that lives ttl past each heartbeat';

CREATE FUNCTION distlock.heartbeat(session_id uuid)
RETURNS boolean
AS 'MODULE_PATHNAME', 'distlock_heartbeat'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION distlock.heartbeat(uuid) IS
	'extend a live session to now + ttl; false once it has expired or closed';

CREATE FUNCTION distlock.session_close(session_id uuid)
RETURNS boolean
AS 'MODULE_PATHNAME', 'distlock_session_close'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION distlock.session_close(uuid) IS
	'end a live session: its locks are freed and its running jobs return to pending';

CREATE FUNCTION distlock.reap()
RETURNS integer
AS 'MODULE_PATHNAME', 'distlock_reap'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION distlock.reap() IS
	'delete expired sessions and return their running jobs to pending; returns the number reaped';

--
-- Queue.
--
CREATE FUNCTION distlock.enqueue(queue text, payload jsonb DEFAULT '{}',
								 run_at timestamptz DEFAULT NULL,
								 priority integer DEFAULT 0,
								 max_attempts integer DEFAULT 5,
								 dedup_key text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'distlock_enqueue'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION distlock.enqueue(text, jsonb, timestamptz, integer, integer, text) IS
	'add a job; with a dedup_key already pending or running, return that job''s id';

CREATE FUNCTION distlock.claim(queue text, session_id uuid,
							   max_jobs integer DEFAULT 1)
RETURNS SETOF distlock.jobs
AS 'MODULE_PATHNAME', 'distlock_claim'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE ROWS 1;
COMMENT ON FUNCTION distlock.claim(text, uuid, integer) IS
	'claim up to max_jobs due jobs for a live session, skipping jobs other claimers hold';

CREATE FUNCTION distlock.complete(job_id bigint, session_id uuid,
								  result jsonb DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'distlock_complete'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION distlock.complete(bigint, uuid, jsonb) IS
	'acknowledge a running job exactly once; true only for its live claiming session';

CREATE FUNCTION distlock.fail(job_id bigint, session_id uuid,
							  error text DEFAULT NULL,
							  retry_in interval DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'distlock_fail'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION distlock.fail(bigint, uuid, text, interval) IS
	'give a running job back for a retry after retry_in (default: backoff), or fail it when attempts are spent';

CREATE FUNCTION distlock.cancel(job_id bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'distlock_cancel'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION distlock.cancel(bigint) IS
	'cancel a pending or running job';
