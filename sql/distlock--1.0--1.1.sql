/* distlock/sql/distlock--1.0--1.1.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION distlock UPDATE TO '1.1'" to load this file. \quit

-- Who may act on what another role created is decided in one place, in C
-- (src/access.c): by the functions, by the views (visible), and by the SQL
-- statements the functions run as the schema owner on behalf of the caller
-- (may_act_for).

CREATE FUNCTION distlock.may_act_for(caller regrole, creator regrole)
RETURNS boolean
AS 'MODULE_PATHNAME', 'distlock_may_act_for'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION distlock.may_act_for(regrole, regrole) IS
	'whether caller has the privileges of creator, of the extension owner or of the database owner';

CREATE OR REPLACE FUNCTION distlock.visible(creator regrole)
RETURNS boolean
AS 'MODULE_PATHNAME', 'distlock_visible'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION distlock.visible(regrole) IS
	'whether the current role has the privileges of creator, of the extension owner or of the database owner';

--
-- Calls that wait in the server (src/wait.c).  Procedures, so that they can
-- commit before they sleep and hold no snapshot or lock while they wait:
-- CALL them outside a transaction block (inside one, only wait => '0').
-- The jobs come back as a jsonb array of objects, one column of
-- distlock.jobs each (jsonb_populate_recordset(NULL::distlock.jobs, jobs)
-- makes rows of them again).
--
CREATE PROCEDURE distlock.claim_wait(queue text, session_id uuid,
									 max_jobs integer DEFAULT 1,
									 wait interval DEFAULT '30 seconds',
									 INOUT jobs jsonb DEFAULT NULL,
									 owner regrole DEFAULT NULL)
AS 'MODULE_PATHNAME', 'distlock_claim_wait'
LANGUAGE C;
COMMENT ON PROCEDURE distlock.claim_wait(text, uuid, integer, interval, jsonb, regrole) IS
	'claim up to max_jobs due jobs of owner''s (default: the current role''s) queue, waiting up to wait for some to be enqueued or become due; returns those claimed';

CREATE PROCEDURE distlock.complete_and_claim_wait(job_id bigint,
												  session_id uuid,
												  result jsonb DEFAULT NULL,
												  max_jobs integer DEFAULT 1,
												  wait interval DEFAULT '30 seconds',
												  INOUT jobs jsonb DEFAULT NULL)
AS 'MODULE_PATHNAME', 'distlock_complete_and_claim_wait'
LANGUAGE C;
COMMENT ON PROCEDURE distlock.complete_and_claim_wait(bigint, uuid, jsonb, integer, interval, jsonb) IS
	'acknowledge a running job as complete_and_claim() does, then claim up to max_jobs jobs of its queue, waiting up to wait for some';

CREATE PROCEDURE distlock.acquire(lock_name text, owner text,
								  ttl interval DEFAULT '30 seconds',
								  session_id uuid DEFAULT NULL,
								  min_hold interval DEFAULT NULL,
								  wait interval DEFAULT '30 seconds',
								  INOUT token bigint DEFAULT NULL)
AS 'MODULE_PATHNAME', 'distlock_acquire'
LANGUAGE C;
COMMENT ON PROCEDURE distlock.acquire(text, text, interval, uuid, interval, interval, bigint) IS
	'try_acquire() that waits up to wait, first come first served, while another owner holds the lock; returns the fencing token, or NULL';

--
-- Retention (src/maintain.c): maintain() reaps expired sessions and deletes
-- finished jobs and free lock rows older than distlock.job_retention and
-- distlock.lock_retention.  The background worker calls it when distlock is
-- preloaded; otherwise anyone (or pg_cron) may.
--
-- maintain(): finished jobs, oldest first.
CREATE INDEX jobs_finished_idx ON distlock.jobs (finished_at)
	WHERE status OPERATOR(pg_catalog.>) 'running'::distlock.job_status;

CREATE FUNCTION distlock.maintain(prune_locks boolean DEFAULT true,
								  OUT reaped integer,
								  OUT jobs_pruned integer,
								  OUT locks_pruned integer)
RETURNS record
AS 'MODULE_PATHNAME', 'distlock_maintain'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION distlock.maintain(boolean) IS
	'reap up to 1000 expired sessions, and delete up to 1000 finished jobs and (with prune_locks) 1000 free lock rows past their retention; returns the numbers';

-- reap() and the reaping claims do in passing take only the sessions of
-- roles whose privileges the caller has (src/session.c, session_reaper()).
COMMENT ON FUNCTION distlock.reap() IS
	'delete the expired sessions of roles whose privileges the caller has, and those whose running jobs are all in queues it may claim from or manage (an administrator: every one), and return their running jobs to pending; returns the number reaped';

--
-- Fencing tokens across failover (src/token.c).  A token is
-- epoch * 2^40 + n, with epoch = base + timeline - 1: a promoted standby
-- starts a higher timeline, so its tokens are above every token the old
-- primary handed out, even grants that asynchronous replication lost.  On
-- timeline 1 the epoch is 0 and tokens stay 1, 2, 3...
--
--	system_identifier	the cluster (pg_control_system()) base was set on;
--						on any other (a restore, pg_upgrade) no lease is
--						granted until maintain() has set base to the
--						sequence's epoch
--	base				epoch of timeline 1
--
CREATE TABLE distlock.token_epoch
(
	system_identifier bigint NOT NULL,
	base		bigint NOT NULL CHECK (base BETWEEN 0 AND 8388607)
);
INSERT INTO distlock.token_epoch
	SELECT system_identifier, 0 FROM pg_catalog.pg_control_system();
SELECT pg_catalog.pg_extension_config_dump('distlock.token_epoch', '');
REVOKE ALL ON distlock.token_epoch FROM PUBLIC;
-- No key: under a publication that publishes deletes (FOR ALL TABLES, say)
-- the rebase's DELETE would be refused, and with it every grant after a
-- restore, without an identity of the whole row.
ALTER TABLE distlock.token_epoch REPLICA IDENTITY FULL;

--
-- Throttles belong to a role (src/throttle.c): a throttle is the pair
-- (owner, name), so a role draws only on its own buckets, or on those of a
-- role whose privileges it has, and no other role can hold its row.  1.0's
-- throttles become their last grantor's.
--
--	owner			role the throttle belongs to
--
ALTER TABLE distlock.throttles ADD COLUMN owner regrole;
UPDATE distlock.throttles SET owner = created_by;
ALTER TABLE distlock.throttles
	ALTER COLUMN owner SET NOT NULL,
	DROP CONSTRAINT throttles_pkey,
	ADD CONSTRAINT throttles_pkey PRIMARY KEY (owner, name);

DROP FUNCTION distlock.throttle(text, interval, integer);
CREATE FUNCTION distlock.throttle(name text, every interval,
								  burst integer DEFAULT 1,
								  owner regrole DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'distlock_throttle'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION distlock.throttle(text, interval, integer, regrole) IS
	'spend one permit of owner''s (default: the current role''s) rate limit of burst permits refilled one per every; false, writing nothing, when none is left';

DROP FUNCTION distlock.throttle_status(text);
CREATE FUNCTION distlock.throttle_status(name text,
										 owner regrole DEFAULT NULL,
										 OUT available integer,
										 OUT next_in interval,
										 OUT every interval,
										 OUT burst integer)
RETURNS record
AS 'MODULE_PATHNAME', 'distlock_throttle_status'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION distlock.throttle_status(text, regrole) IS
	'permits owner''s (default: the current role''s) throttle has now and the time until its next one, judged with the every and burst of its last grant';

--
-- The database's owner and the role that ran this script (a database
-- owner who installed the trusted extension, or who updated it) can back
-- distlock up and restore it without being a superuser: pg_dump reads
-- every table and counter, and pg_restore adds rows and sets the counters
-- (so fencing tokens and job ids go on from where they were).  Nothing
-- more: they cannot update, delete or truncate rows, and own nothing, so
-- no trigger of theirs runs inside distlock's calls.  They can already act
-- for every role through the functions (src/access.c).
--
-- The database's owner is named as pg_database_owner, which core makes
-- whoever owns the database now: a superuser who runs ALTER EXTENSION
-- UPDATE, or installs distlock, and a new owner after ALTER DATABASE ...
-- OWNER TO, leave the owner with what it needs.  Any role with CREATE on
-- the database may install a trusted extension: the database's owner
-- administers it all the same, and gets USAGE on the schema, and by name
-- the right to grant it, as the extension's owner does.  By name, so that
-- the grants it makes name it as their grantor: granted through
-- pg_database_owner, they would name that role, and a dump would restore
-- them with SET SESSION AUTHORIZATION pg_database_owner, which only a
-- superuser may.
--
GRANT SELECT, INSERT ON distlock.locks, distlock.sessions, distlock.jobs,
	distlock.throttles, distlock.token_epoch TO @extowner@, pg_database_owner;
GRANT SELECT, UPDATE ON distlock.token_seq, distlock.jobs_id_seq
	TO @extowner@, pg_database_owner;
GRANT USAGE ON SCHEMA distlock TO pg_database_owner;
DO $$
BEGIN
	EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA distlock TO %I WITH GRANT OPTION',
		(SELECT pg_catalog.pg_get_userbyid(d.datdba) FROM pg_catalog.pg_database d
		  WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()));
END
$$;

--
-- A role's rows, for an administrator (src/admin.c): as REASSIGN OWNED and
-- DROP OWNED do for objects, run one of these in each database before
-- DROP ROLE.  Neither waits: what another transaction holds is left, and
-- the counts say what was done.
--
CREATE FUNCTION distlock.reassign_owned(old_role regrole, new_role regrole,
										OUT sessions bigint,
										OUT locks bigint,
										OUT jobs bigint,
										OUT throttles bigint,
										OUT queue_grants bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'distlock_reassign_owned'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION distlock.reassign_owned(regrole, regrole) IS
	'give old_role''s sessions, lock grants, jobs, queues, throttles and queue grants to new_role, skipping what others hold; returns the numbers';

CREATE FUNCTION distlock.drop_owned(role regrole,
									OUT sessions bigint,
									OUT locks bigint,
									OUT jobs bigint,
									OUT throttles bigint,
										OUT queue_grants bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'distlock_drop_owned'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION distlock.drop_owned(regrole) IS
	'end role''s sessions and delete its lock rows, jobs, the jobs of its queues, its throttles and queue grants, skipping what others hold; returns the numbers';

--
-- Per-role limits (src/limits.c).  A row per role with a limit of its
-- own, and the row without a role (NULL) with the defaults for every role; a
-- value not set (NULL) in either is the built-in default (1000 sessions,
-- 10000 throttles, 100000 lock names, 10000 queue grants, 1 MB per
-- payload, result, session info or error text).
-- Set with set_limit(), by administrators; readable by everyone.
--
--	role			the role, or NULL for the defaults ('-', a role missing
--					when the rows were restored, or dropped, limits nobody)
--	max_sessions	sessions it may have open at once
--	max_throttles	throttles it may own
--	max_locks		lock names (rows of distlock.locks) it may have
--	max_grants		queue grants it may give
--	max_payload		bytes of one payload, result, info or error text
--
CREATE TABLE distlock.limits
(
	role		regrole,
	max_sessions integer CHECK (max_sessions OPERATOR(pg_catalog.>=) 0),
	max_throttles integer CHECK (max_throttles OPERATOR(pg_catalog.>=) 0),
	max_payload integer CHECK (max_payload OPERATOR(pg_catalog.>=) 1024),
	max_locks	integer CHECK (max_locks OPERATOR(pg_catalog.>=) 0),
	max_grants	integer CHECK (max_grants OPERATOR(pg_catalog.>=) 0)
);
-- one row per role (of rows without one, any number: see role_ref below),
-- one row of defaults
CREATE UNIQUE INDEX limits_role_idx ON distlock.limits (role)
	WHERE role OPERATOR(pg_catalog.<>) 0::pg_catalog.oid;
CREATE UNIQUE INDEX limits_defaults_idx ON distlock.limits ((role IS NULL))
	WHERE role IS NULL;
SELECT pg_catalog.pg_extension_config_dump('distlock.limits', '');
REVOKE ALL ON distlock.limits FROM PUBLIC;
GRANT SELECT ON distlock.limits TO PUBLIC;
GRANT SELECT, INSERT ON distlock.limits TO @extowner@, pg_database_owner;

-- session_open() counts the caller's sessions (and at its limit reaps its
-- expired ones first), a first grant its locks.
CREATE INDEX sessions_created_by_idx ON distlock.sessions
	(created_by, expires_at, id);
CREATE INDEX locks_created_by_idx ON distlock.locks (created_by);

CREATE FUNCTION distlock.set_limit(limit_name text, value integer,
								   role regrole DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'distlock_set_limit'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION distlock.set_limit(text, integer, regrole) IS
	'set a per-role limit (sessions, throttles, locks, grants, payload bytes) of role, or the default of every role; NULL clears it; administrators only';

--
-- The views read functions that run their queries as the schema owner with
-- the caller's filter inside (src/views.c), so that EXPLAIN ANALYZE of a
-- view shows the caller only the rows it may see, not how many rows of
-- other roles a filter removed.
--
CREATE FUNCTION distlock.live_sessions_rows()
RETURNS TABLE (id uuid, owner text, info jsonb, ttl interval,
			   created_at timestamptz, heartbeat_at timestamptz,
			   expires_at timestamptz, remaining interval, created_by regrole)
AS 'MODULE_PATHNAME', 'distlock_live_sessions_rows'
LANGUAGE C STABLE PARALLEL UNSAFE ROWS 100;

CREATE FUNCTION distlock.active_locks_rows()
RETURNS TABLE (name text, owner text, session_id uuid, token bigint,
			   acquired_at timestamptz, renewed_at timestamptz,
			   expires_at timestamptz, remaining interval,
			   hold_until timestamptz, created_by regrole)
AS 'MODULE_PATHNAME', 'distlock_active_locks_rows'
LANGUAGE C STABLE PARALLEL UNSAFE ROWS 100;

CREATE FUNCTION distlock.queue_stats_rows()
RETURNS TABLE (queue text, pending bigint, running bigint, completed bigint,
			   failed bigint, cancelled bigint, oldest_pending_age interval,
			   queue_owner regrole)
AS 'MODULE_PATHNAME', 'distlock_queue_stats_rows'
LANGUAGE C STABLE PARALLEL UNSAFE ROWS 10;

COMMENT ON FUNCTION distlock.live_sessions_rows() IS
	'the rows of view live_sessions, of the roles the caller may act for';
COMMENT ON FUNCTION distlock.active_locks_rows() IS
	'the rows of view active_locks, of the roles the caller may act for';
COMMENT ON FUNCTION distlock.queue_stats_rows() IS
	'the rows of view queue_stats, of the queues the caller may claim from or manage, and of its own jobs in others';

CREATE OR REPLACE VIEW distlock.live_sessions WITH (security_barrier) AS
SELECT * FROM distlock.live_sessions_rows();
CREATE OR REPLACE VIEW distlock.active_locks WITH (security_barrier) AS
SELECT * FROM distlock.active_locks_rows();
CREATE OR REPLACE VIEW distlock.queue_stats WITH (security_barrier) AS
SELECT * FROM distlock.queue_stats_rows();

--
-- distlock.role_ref (src/roleref.c): the role a row belongs to, regrole
-- with an input that keeps the row, as belonging to no role ('-', 0), when
-- a restore names a role the target does not have (regrole's would fail
-- the COPY of the whole table), and an output that writes '-' for an OID
-- no role has any more.  Binary-coercible to regrole and oid, so the
-- columns change type without a rewrite and compare as before.
--
CREATE TYPE distlock.role_ref;
CREATE FUNCTION distlock.role_ref_in(cstring) RETURNS distlock.role_ref
AS 'MODULE_PATHNAME', 'distlock_role_ref_in'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
CREATE FUNCTION distlock.role_ref_out(distlock.role_ref) RETURNS cstring
AS 'MODULE_PATHNAME', 'distlock_role_ref_out'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
CREATE FUNCTION distlock.role_ref_recv(internal) RETURNS distlock.role_ref
AS 'MODULE_PATHNAME', 'distlock_role_ref_recv'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
CREATE FUNCTION distlock.role_ref_send(distlock.role_ref) RETURNS bytea
AS 'MODULE_PATHNAME', 'distlock_role_ref_send'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
CREATE TYPE distlock.role_ref (
	INPUT = distlock.role_ref_in,
	OUTPUT = distlock.role_ref_out,
	RECEIVE = distlock.role_ref_recv,
	SEND = distlock.role_ref_send,
	LIKE = pg_catalog.oid
);
COMMENT ON FUNCTION distlock.role_ref_in(cstring) IS
	'input of role_ref: a role name, - for none; a name no role has reads as none, with a warning';
COMMENT ON FUNCTION distlock.role_ref_out(distlock.role_ref) IS
	'output of role_ref: the role name, or - for none or a role that is gone';
COMMENT ON FUNCTION distlock.role_ref_recv(internal) IS
	'binary input of role_ref: the name, as role_ref_in reads it';
COMMENT ON FUNCTION distlock.role_ref_send(distlock.role_ref) IS
	'binary output of role_ref: the name, as role_ref_out writes it';
COMMENT ON TYPE distlock.role_ref IS
	'the role a row belongs to: a role name, or - for none (a role missing when the row was restored, or dropped)';
CREATE CAST (distlock.role_ref AS pg_catalog.oid) WITHOUT FUNCTION AS IMPLICIT;
CREATE CAST (distlock.role_ref AS pg_catalog.regrole) WITHOUT FUNCTION AS IMPLICIT;
CREATE CAST (pg_catalog.oid AS distlock.role_ref) WITHOUT FUNCTION AS ASSIGNMENT;
CREATE CAST (pg_catalog.regrole AS distlock.role_ref) WITHOUT FUNCTION AS ASSIGNMENT;

ALTER TABLE distlock.locks ALTER COLUMN created_by TYPE distlock.role_ref;
ALTER TABLE distlock.sessions ALTER COLUMN created_by TYPE distlock.role_ref;
ALTER TABLE distlock.jobs ALTER COLUMN created_by TYPE distlock.role_ref;
ALTER TABLE distlock.throttles ALTER COLUMN created_by TYPE distlock.role_ref,
	ALTER COLUMN owner TYPE distlock.role_ref;
ALTER TABLE distlock.limits ALTER COLUMN role TYPE distlock.role_ref;

-- Rows restored without their role (0) must not collide with one another,
-- or the COPY of the whole table would fail: what is unique per role is so
-- for real roles only.  (Such rows are never looked up by a call: only an
-- administrator reaches them, through reassign_owned('-', ...).)
ALTER TABLE distlock.throttles DROP CONSTRAINT throttles_pkey;
CREATE UNIQUE INDEX throttles_owner_name_idx ON distlock.throttles
	(owner, name) WHERE owner OPERATOR(pg_catalog.<>) 0::pg_catalog.oid;

-- Without a primary key, logical replication of these tables (a
-- publication FOR ALL TABLES, say) identifies a changed row by all of it.
ALTER TABLE distlock.throttles REPLICA IDENTITY FULL;
ALTER TABLE distlock.limits REPLICA IDENTITY FULL;

--
-- Queues belong to a role (src/grants.c).  A queue is the pair (owner,
-- name): a role's enqueue('emails') and claim('emails') name its own
-- queue, and another role's queue is named with the owner argument.  Only
-- roles with the owner's privileges, or a privilege the owner granted
-- (grant_queue()), may put jobs in a queue, claim them or manage them, so
-- no other role's jobs are ever in a claim's path or hold a dedup key, and
-- no role can take another's queue name first.  1.0's jobs go to the queue
-- of the role that enqueued them.
--
--	queue_owner		role the job's queue belongs to
--
DROP INDEX distlock.jobs_claim_idx;
DROP INDEX distlock.jobs_dedup_idx;
ALTER TABLE distlock.jobs ADD COLUMN queue_owner distlock.role_ref;
UPDATE distlock.jobs SET queue_owner = created_by;
ALTER TABLE distlock.jobs ALTER COLUMN queue_owner SET NOT NULL;

CREATE INDEX jobs_claim_idx ON distlock.jobs
	(queue_owner, queue, priority DESC, run_at, id)
	WHERE status OPERATOR(pg_catalog.=) 'pending'::distlock.job_status;

CREATE UNIQUE INDEX jobs_dedup_idx ON distlock.jobs
	(queue_owner, queue, dedup_key)
	WHERE dedup_key IS NOT NULL
	  AND status OPERATOR(pg_catalog.<=) 'running'::distlock.job_status
	  AND queue_owner OPERATOR(pg_catalog.<>) 0::pg_catalog.oid;

--
-- What the owner of a queue lets other roles do in it.  Readable by
-- everyone, as the ACLs of the system catalogs are.
--
--	owner			role the queue belongs to
--	queue			its name
--	grantee			role given the privileges (and every role with its
--					privileges)
--	enqueue			may add jobs
--	claim			may claim jobs, whoever enqueued them
--	manage			may see and cancel every job of the queue
--
CREATE TABLE distlock.queue_grants
(
	owner		distlock.role_ref NOT NULL,
	queue		text NOT NULL,
	grantee		distlock.role_ref NOT NULL,
	enqueue		boolean NOT NULL,
	claim		boolean NOT NULL,
	manage		boolean NOT NULL
);
CREATE UNIQUE INDEX queue_grants_idx ON distlock.queue_grants
	(owner, queue, grantee)
	WHERE owner OPERATOR(pg_catalog.<>) 0::pg_catalog.oid
	  AND grantee OPERATOR(pg_catalog.<>) 0::pg_catalog.oid;
CREATE INDEX queue_grants_grantee_idx ON distlock.queue_grants (grantee);
ALTER TABLE distlock.queue_grants REPLICA IDENTITY FULL;
SELECT pg_catalog.pg_extension_config_dump('distlock.queue_grants', '');
REVOKE ALL ON distlock.queue_grants FROM PUBLIC;
GRANT SELECT ON distlock.queue_grants TO PUBLIC;
GRANT SELECT, INSERT ON distlock.queue_grants TO @extowner@, pg_database_owner;

DROP FUNCTION distlock.enqueue(text, jsonb, timestamptz, integer, integer, text);
CREATE FUNCTION distlock.enqueue(queue text, payload jsonb DEFAULT '{}',
								 run_at timestamptz DEFAULT NULL,
								 priority integer DEFAULT 0,
								 max_attempts integer DEFAULT 5,
								 dedup_key text DEFAULT NULL,
								 owner regrole DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'distlock_enqueue'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION distlock.enqueue(text, jsonb, timestamptz, integer, integer, text, regrole) IS
	'add a job to owner''s (default: the current role''s) queue; with a dedup_key already pending or running there, return that job''s id';

DROP FUNCTION distlock.claim(text, uuid, integer);
CREATE FUNCTION distlock.claim(queue text, session_id uuid,
							   max_jobs integer DEFAULT 1,
							   owner regrole DEFAULT NULL)
RETURNS SETOF distlock.jobs
AS 'MODULE_PATHNAME', 'distlock_claim'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE ROWS 1;
COMMENT ON FUNCTION distlock.claim(text, uuid, integer, regrole) IS
	'claim up to max_jobs due jobs of owner''s (default: the current role''s) queue for a live session, skipping jobs other claimers hold';

CREATE FUNCTION distlock.grant_queue(queue text, privileges text,
									 grantee regrole,
									 owner regrole DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'distlock_grant_queue'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION distlock.grant_queue(text, text, regrole, regrole) IS
	'let grantee enqueue, claim or manage (a comma-separated list, or all) in owner''s (default: the current role''s) queue';

CREATE FUNCTION distlock.revoke_queue(queue text, privileges text,
									  grantee regrole,
									  owner regrole DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'distlock_revoke_queue'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION distlock.revoke_queue(text, text, regrole, regrole) IS
	'take back privileges (enqueue, claim, manage, a comma-separated list, or all) grant_queue() gave grantee on owner''s (default: the current role''s) queue';

CREATE FUNCTION distlock.has_queue_privilege(role regrole, queue text,
											 privilege text,
											 owner regrole DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'distlock_has_queue_privilege'
LANGUAGE C STABLE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION distlock.has_queue_privilege(regrole, text, text, regrole) IS
	'whether role may enqueue, claim or manage (any of a comma-separated list) in owner''s (default: the current role''s) queue';

CREATE FUNCTION distlock.cancel_jobs(queue text, owner regrole DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'distlock_cancel_jobs'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE;
COMMENT ON FUNCTION distlock.cancel_jobs(text, regrole) IS
	'cancel every pending and running job of owner''s (default: the current role''s) queue that no other transaction holds; returns how many';

-- Claim positions (src/position.c): a claim starts each priority group of
-- its queue where the last claims left off, instead of stepping over every
-- entry earlier claims left in jobs_claim_idx (all of them, while anything
-- holds vacuum back).  Every statement that makes a job pending or takes
-- one out of pending, whoever runs it, fires one of these triggers, so
-- that its commit or abort moves the group's position back to the job
-- (a job is noted before it is taken: BEFORE).
-- ALWAYS: in replication and restores too.
CREATE FUNCTION distlock.jobs_pending()
RETURNS trigger
AS 'MODULE_PATHNAME', 'distlock_jobs_pending'
LANGUAGE C;
COMMENT ON FUNCTION distlock.jobs_pending() IS
	'trigger: notes the jobs a statement makes pending (''new'') or takes out of pending (''old''), so that claims never start past them';
CREATE TRIGGER jobs_pending AFTER INSERT OR UPDATE ON distlock.jobs
	FOR EACH ROW
	WHEN (NEW.status OPERATOR(pg_catalog.=) 'pending'::distlock.job_status)
	EXECUTE FUNCTION distlock.jobs_pending('new');
CREATE TRIGGER jobs_unpending BEFORE UPDATE OR DELETE ON distlock.jobs
	FOR EACH ROW
	WHEN (OLD.status OPERATOR(pg_catalog.=) 'pending'::distlock.job_status)
	EXECUTE FUNCTION distlock.jobs_pending('old');
ALTER TABLE distlock.jobs ENABLE ALWAYS TRIGGER jobs_pending;
ALTER TABLE distlock.jobs ENABLE ALWAYS TRIGGER jobs_unpending;

-- Heartbeats kept in shared memory (src/beat.c): with distlock preloaded
-- (or the DSM registry, 17 and later) a session's expires_at is a bound
-- its heartbeats' promise never passes, written ahead of it, and the
-- promise itself lives in shared memory.  The views show the promise.
CREATE FUNCTION distlock.session_expiry(session_id uuid, expires_at timestamptz)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'distlock_session_expiry'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;
COMMENT ON FUNCTION distlock.session_expiry(uuid, timestamptz) IS
	'when session session_id, whose row says expires_at, expires: what its heartbeats promised';
REVOKE ALL ON FUNCTION distlock.session_expiry(uuid, timestamptz) FROM PUBLIC;
COMMENT ON COLUMN distlock.sessions.expires_at IS
	'a bound on the session''s expiry, which the distlock.live_sessions view shows; equal to it unless heartbeats are kept in shared memory';

-- A batch worker's loop in one call and one transaction (src/queue.c):
-- every job of the batch acknowledged, or none and 55000, then the next
-- batch claimed from their queue.
CREATE FUNCTION distlock.complete_batch_and_claim(job_ids bigint[],
												  session_id uuid,
												  result jsonb DEFAULT NULL,
												  max_jobs integer DEFAULT NULL)
RETURNS SETOF distlock.jobs
AS 'MODULE_PATHNAME', 'distlock_complete_batch_and_claim'
LANGUAGE C VOLATILE CALLED ON NULL INPUT PARALLEL UNSAFE ROWS 10;
COMMENT ON FUNCTION distlock.complete_batch_and_claim(bigint[], uuid, jsonb, integer) IS
	'acknowledge every job of job_ids as complete_batch() does, then claim up to max_jobs (default: as many as were acknowledged) due jobs of their queue; a refused acknowledgement raises 55000';
