-- test/fault/setup.sql -- the fault-injection harness's own objects.
--
-- Created by test/fault/workload.py in the throwaway test database, never by
-- the extension.  Nothing here touches distlock's tables: no trigger, rule
-- or policy, which would send claims and acknowledgements down the SQL path
-- (src/direct.c falls back to it on a table with any of them) and test the
-- wrong code.  The changes of distlock's rows are read from the WAL instead,
-- through the logical replication slot that workload.py creates after this
-- script (test_decoding); fault.writes is the fenced resource's log of
-- accepted writes and fault.effects the queue workers' effects.  Times are
-- stored as microseconds since the epoch so that the checker compares
-- integers.

CREATE EXTENSION distlock;
CREATE SCHEMA fault;

-- Which statements ran, nested ones included (pg_stat_statements.track =
-- all): the check that claims and acknowledgements took the path under
-- test.  Loaded by shared_preload_libraries in the cluster run.sh starts.
CREATE EXTENSION pg_stat_statements;

CREATE FUNCTION fault.us(timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT (extract(epoch FROM $1) * 1000000)::bigint $$;

--
-- The fenced resource: one row per lock name, written only in a transaction
-- that called distlock.fence() and only by a token at least as new as the
-- last one it accepted; every accepted write is logged in fault.writes.
--
CREATE TABLE fault.resource
(
	name		text PRIMARY KEY,
	last_token	bigint NOT NULL DEFAULT 0,
	writes		bigint NOT NULL DEFAULT 0
);

CREATE TABLE fault.writes
(
	id			bigserial PRIMARY KEY,
	name		text NOT NULL,
	token		bigint NOT NULL,
	owner		text NOT NULL,
	xid			xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),
	at			bigint NOT NULL DEFAULT fault.us(pg_catalog.clock_timestamp())
);

-- A queue worker's effect, inserted in the transaction of an accepted
-- acknowledgement.  No unique constraint: a duplicate must be visible.
CREATE TABLE fault.effects
(
	id			bigserial PRIMARY KEY,
	job_id		bigint NOT NULL,
	session_id	uuid NOT NULL,
	worker		text NOT NULL,
	xid			xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),
	at			bigint NOT NULL DEFAULT fault.us(pg_catalog.clock_timestamp())
);

-- Status and commit time of a transaction id taken before a crash.  A
-- transaction that wrote no WAL before the crash left no trace, and its id
-- may be "in the future" after recovery (or handed out again): 'unknown'.
CREATE FUNCTION fault.xact(x bigint, OUT status text, OUT commit_us bigint)
LANGUAGE plpgsql
AS $$
BEGIN
	status := pg_catalog.pg_xact_status(x::text::xid8);
	IF status = 'committed' THEN
		commit_us := fault.us(pg_catalog.pg_xact_commit_timestamp(x::text::xid8::xid));
	END IF;
EXCEPTION WHEN OTHERS THEN
	status := 'unknown';
END
$$;
