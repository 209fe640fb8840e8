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
-- The three tables the hot paths write (sessions, locks, jobs) have no
-- CHECK constraints: PostgreSQL 15 parses and plans a table's CHECK
-- constraints again for every UPDATE statement, which cost a job cycle
-- about 6% of its time.  Only the extension's owner can write them
-- directly; the functions, their only writers otherwise, enforce the same
-- rules before touching a table (names of 1 to 255 characters: 22023,
-- 22001; attempts counted from 0, max_attempts from 1: 22023), see
-- src/check.c.
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
	CONSTRAINT sessions_pkey PRIMARY KEY (id)
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
--	hold_until		acquired_at + the grant's min_hold, or NULL
--	created_by		role that made the current (or last) grant
--
-- A lease blocks other owners while owner is set, expires_at is NULL or in
-- the future, and its session (if any) is live; and, whatever becomes of
-- its holder, until hold_until.  Nothing else is needed to free a lock:
-- expiry, session death and the end of a hold take effect on the server
-- clock.
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
	hold_until	timestamptz,
	created_by	regrole NOT NULL,
	CONSTRAINT locks_pkey PRIMARY KEY (name)
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
	CONSTRAINT jobs_pkey PRIMARY KEY (id)
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
-- Views.  They judge liveness on clock_timestamp(), like the functions, and
-- show a role only the rows of roles whose privileges it has (all rows to
-- those with the privileges of the extension's owner), as the functions
-- let it act only on those.  security_barrier keeps a caller's own
-- conditions from seeing the other rows first.
--
-- Whether the current role may see (and act on) what role creator created:
-- the rule the functions apply in C (src/access.c), for the views.
CREATE FUNCTION distlock.visible(creator regrole)
RETURNS boolean
LANGUAGE sql STABLE STRICT PARALLEL SAFE
RETURN pg_catalog.pg_has_role(creator, 'USAGE')
	OR pg_catalog.pg_has_role((SELECT e.extowner FROM pg_catalog.pg_extension e
								WHERE e.extname OPERATOR(pg_catalog.=) 'distlock'),
							  'USAGE');
COMMENT ON FUNCTION distlock.visible(regrole) IS
	'whether the current role has the privileges of creator, or of the extension owner';

CREATE VIEW distlock.live_sessions WITH (security_barrier) AS
SELECT s.id, s.owner, s.info, s.ttl, s.created_at, s.heartbeat_at,
	   s.expires_at,
	   s.expires_at OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp()
		   AS remaining,
	   s.created_by
  FROM distlock.sessions s
 WHERE s.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
   AND distlock.visible(s.created_by);

COMMENT ON VIEW distlock.live_sessions IS
	'sessions that have not expired, with the time they have left';

-- A lock is shown while it blocks other owners: while its holder's claim is
-- intact (an owner, and a live session if bound to one) and unexpired, or
-- while its minimum hold lasts.  owner, session_id and expires_at are NULL
-- once nobody can renew the lock (released, or its session ended) and only
-- the hold keeps it.  remaining is the time until another owner could take
-- the lock if its holder does nothing (NULL: until released).
CREATE VIEW distlock.active_locks WITH (security_barrier) AS
SELECT l.name,
	   CASE WHEN c.intact THEN l.owner END AS owner,
	   CASE WHEN c.intact THEN l.session_id END AS session_id,
	   l.token, l.acquired_at, l.renewed_at,
	   CASE WHEN c.intact THEN l.expires_at END AS expires_at,
	   CASE WHEN c.intact AND l.expires_at IS NULL THEN NULL
			WHEN c.intact THEN GREATEST(l.expires_at, l.hold_until)
			ELSE l.hold_until
	   END OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp() AS remaining,
	   l.hold_until,
	   l.created_by
  FROM distlock.locks l,
	   LATERAL (SELECT l.owner IS NOT NULL
					   AND (l.session_id IS NULL
							OR EXISTS (SELECT 1 FROM distlock.sessions s
										WHERE s.id OPERATOR(pg_catalog.=) l.session_id
										  AND s.expires_at OPERATOR(pg_catalog.>)
											  pg_catalog.clock_timestamp()))
				AS intact) c
 WHERE ((c.intact
		 AND (l.expires_at IS NULL
			  OR l.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()))
		OR l.hold_until OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp())
   AND distlock.visible(l.created_by);

COMMENT ON VIEW distlock.active_locks IS
	'locks that keep other owners out right now, with the time until they would free themselves (NULL: until released)';

CREATE VIEW distlock.queue_stats WITH (security_barrier) AS
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
 WHERE distlock.visible(j.created_by)
 GROUP BY j.queue;

-- The views show each role its own rows only: anyone may read them.
GRANT SELECT ON distlock.live_sessions, distlock.active_locks,
	distlock.queue_stats TO PUBLIC;

-- distlock is trusted: a database owner who installs it owns the extension
-- but not the schema, which the bootstrap superuser creates.  Let that owner
-- hand the schema on to the roles that are to use distlock.
GRANT USAGE ON SCHEMA distlock TO @extowner@ WITH GRANT OPTION;

COMMENT ON VIEW distlock.queue_stats IS
	'per queue: jobs in each status, and how long the oldest due pending job has waited';

--
-- Leases.  The functions are not STRICT: a NULL where a value is needed is an
-- error (22004), never a silent NULL answer.
--
CREATE FUNCTION distlock.try_acquire(lock_name text, owner text,
									 ttl interval DEFAULT '30 seconds',
									 session_id uuid DEFAULT NULL,
									 min_hold interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'distlock_try_acquire'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION distlock.try_acquire(text, text, interval, uuid, interval) IS
	'take or re-enter a lease, kept from other owners for at least min_hold; returns its fencing token, or NULL while another owner holds it';

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

-- A batch worker's acknowledgement: the ids acknowledged come back.
CREATE FUNCTION distlock.complete_batch(job_ids bigint[], session_id uuid,
										result jsonb DEFAULT NULL)
RETURNS SETOF bigint
AS 'MODULE_PATHNAME', 'distlock_complete_batch'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE ROWS 100;
COMMENT ON FUNCTION distlock.complete_batch(bigint[], uuid, jsonb) IS
	'acknowledge each of up to 1000 jobs as complete() does, in one statement; returns the ids acknowledged';

-- A worker's loop in one call and one transaction.  A refused
-- acknowledgement raises 55000 (rather than answering false), so that the
-- worker's own writes for the job in the same transaction roll back.
CREATE FUNCTION distlock.complete_and_claim(job_id bigint, session_id uuid,
											result jsonb DEFAULT NULL,
											max_jobs integer DEFAULT 1)
RETURNS SETOF distlock.jobs
AS 'MODULE_PATHNAME', 'distlock_complete_and_claim'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE ROWS 1;
COMMENT ON FUNCTION distlock.complete_and_claim(bigint, uuid, jsonb, integer) IS
	'acknowledge a running job as complete() does, then claim up to max_jobs due jobs of its queue; a refused acknowledgement raises 55000';

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

--
-- Rate limits and advisory-lock helpers.
--

--
-- distlock.throttles: one row per throttle name ever used, a token bucket
-- of at most burst permits that gets one permit back per every (see
-- src/throttle.c).  At time t it holds
--		least(burst, permits + floor((t - refilled_at) / every))
-- permits.  The row outlives its bucket being full again, like a lock row.
--
--	name			throttle name, 1 to 255 characters
--	every			refill period of the last grant
--	burst			capacity of the last grant
--	permits			permits left at refilled_at
--	refilled_at		server time up to which refills are counted
--	granted_at		server time of the last grant
--	created_by		role that made the last grant
--
CREATE TABLE distlock.throttles
(
	name		text NOT NULL,
	every		interval NOT NULL,
	burst		integer NOT NULL,
	permits		integer NOT NULL,
	refilled_at timestamptz NOT NULL,
	granted_at	timestamptz NOT NULL,
	created_by	regrole NOT NULL,
	CONSTRAINT throttles_pkey PRIMARY KEY (name),
	CONSTRAINT throttles_name_check
		CHECK (pg_catalog.char_length(name) OPERATOR(pg_catalog.>=) 1
			   AND pg_catalog.char_length(name) OPERATOR(pg_catalog.<=) 255),
	CONSTRAINT throttles_permits_check
		CHECK (permits OPERATOR(pg_catalog.>=) 0
			   AND permits OPERATOR(pg_catalog.<) burst)
);

SELECT pg_catalog.pg_extension_config_dump('distlock.throttles', '');
REVOKE ALL ON distlock.throttles FROM PUBLIC;

CREATE FUNCTION distlock.throttle(name text, every interval,
								  burst integer DEFAULT 1)
RETURNS boolean
AS 'MODULE_PATHNAME', 'distlock_throttle'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION distlock.throttle(text, interval, integer) IS
	'spend one permit of a rate limit of burst permits refilled one per every; false, writing nothing, when none is left';

CREATE FUNCTION distlock.throttle_status(name text,
										 OUT available integer,
										 OUT next_in interval,
										 OUT every interval,
										 OUT burst integer)
RETURNS record
AS 'MODULE_PATHNAME', 'distlock_throttle_status'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION distlock.throttle_status(text) IS
	'permits a throttle has now and the time until its next one, judged with the every and burst of its last grant';

-- A pure function of its argument, so IMMUTABLE and PARALLEL SAFE; not
-- STRICT, like the rest of the API: a NULL name raises 22004.
CREATE FUNCTION distlock.lock_key(name text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'distlock_lock_key'
LANGUAGE C IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE;
COMMENT ON FUNCTION distlock.lock_key(text) IS
	'advisory-lock key of a name: the first 8 bytes of the SHA-256 of its UTF-8 text, as a little-endian bigint';

--
-- The advisory locks of the current database, decoded: key for the
-- one-bigint form (pg_locks.objsubid 1: classid holds the high 32 bits,
-- objid the low), key1 and key2 for the two-integer form (objsubid 2).
-- blocked_by lists the backends a waiting request waits for.  It reads only
-- the system views, as the caller (security_invoker), so a caller sees the
-- query text pg_stat_activity would show it.
--
CREATE VIEW distlock.advisory_locks WITH (security_invoker = true) AS
SELECT CASE WHEN l.objsubid OPERATOR(pg_catalog.=) 1
			THEN (l.classid::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32)
				 OPERATOR(pg_catalog.|) l.objid::pg_catalog.int8
	   END AS key,
	   CASE WHEN l.objsubid OPERATOR(pg_catalog.=) 2
			THEN l.classid::pg_catalog.int4
	   END AS key1,
	   CASE WHEN l.objsubid OPERATOR(pg_catalog.=) 2
			THEN l.objid::pg_catalog.int4
	   END AS key2,
	   l.pid, l.mode, l.granted, l.waitstart,
	   CASE WHEN NOT l.granted THEN pg_catalog.pg_blocking_pids(l.pid) END
		   AS blocked_by,
	   a.application_name, a.query
  FROM pg_catalog.pg_locks l
  LEFT JOIN pg_catalog.pg_stat_activity a
	ON a.pid OPERATOR(pg_catalog.=) l.pid
 WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory'
   AND l.database OPERATOR(pg_catalog.=)
	   (SELECT d.oid FROM pg_catalog.pg_database d
		 WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database());

REVOKE ALL ON distlock.advisory_locks FROM PUBLIC;

COMMENT ON VIEW distlock.advisory_locks IS
	'advisory locks of this database, held and awaited, with their 64-bit key (or two integer keys) and the session holding or awaiting each';
