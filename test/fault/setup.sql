-- test/fault/setup.sql -- the fault-injection harness's own objects.
--
-- Created by test/fault/workload.py in the throwaway test database, never by
-- the extension.  Every change of a distlock row is appended to fault.audit
-- by AFTER triggers, with the changing transaction's id and the server clock
-- at the change; fault.writes is the fenced resource's log of accepted
-- writes and fault.effects the queue workers' effects.  Times are stored as
-- microseconds since the epoch so that the checker compares integers.

CREATE EXTENSION distlock;
CREATE SCHEMA fault;

CREATE FUNCTION fault.us(timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT (extract(epoch FROM $1) * 1000000)::bigint $$;

--
-- Audit: one row per row change of distlock.locks, distlock.sessions and
-- distlock.jobs, in the changing transaction (so it commits or aborts with
-- the change).  old and new hold the columns the checker needs, times in
-- microseconds.
--
CREATE TABLE fault.audit
(
	id			bigserial PRIMARY KEY,
	tbl			text NOT NULL,
	op			text NOT NULL,
	xid			xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id(),
	at			bigint NOT NULL,
	old			jsonb,
	new			jsonb
);

CREATE FUNCTION fault.pick(tbl text, r jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
SELECT CASE tbl
	WHEN 'locks' THEN pg_catalog.jsonb_build_object(
		'name', r->'name', 'owner', r->'owner', 'session', r->'session_id',
		'token', r->'token',
		'acquired', fault.us((r->>'acquired_at')::timestamptz),
		'renewed', fault.us((r->>'renewed_at')::timestamptz),
		'expires', fault.us((r->>'expires_at')::timestamptz),
		'hold', fault.us((r->>'hold_until')::timestamptz))
	WHEN 'sessions' THEN pg_catalog.jsonb_build_object(
		'id', r->'id', 'owner', r->'owner',
		'created', fault.us((r->>'created_at')::timestamptz),
		'heartbeat', fault.us((r->>'heartbeat_at')::timestamptz),
		'expires', fault.us((r->>'expires_at')::timestamptz))
	WHEN 'jobs' THEN pg_catalog.jsonb_build_object(
		'id', r->'id', 'status', r->'status', 'session', r->'session_id',
		'attempts', r->'attempts',
		'claimed', fault.us((r->>'claimed_at')::timestamptz),
		'finished', fault.us((r->>'finished_at')::timestamptz))
	END
$$;

-- distlock's functions run their statements with search_path
-- "pg_catalog, pg_temp", so everything here is qualified.
CREATE FUNCTION fault.audit_row() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
	INSERT INTO fault.audit (tbl, op, at, old, new)
	VALUES (TG_TABLE_NAME, pg_catalog.left(TG_OP, 1),
			fault.us(pg_catalog.clock_timestamp()),
			CASE WHEN TG_OP <> 'INSERT'
				 THEN fault.pick(TG_TABLE_NAME, pg_catalog.to_jsonb(OLD)) END,
			CASE WHEN TG_OP <> 'DELETE'
				 THEN fault.pick(TG_TABLE_NAME, pg_catalog.to_jsonb(NEW)) END);
	RETURN NULL;
END
$$;

CREATE TRIGGER fault_audit AFTER INSERT OR UPDATE OR DELETE ON distlock.locks
	FOR EACH ROW EXECUTE FUNCTION fault.audit_row();
CREATE TRIGGER fault_audit AFTER INSERT OR UPDATE OR DELETE ON distlock.sessions
	FOR EACH ROW EXECUTE FUNCTION fault.audit_row();
CREATE TRIGGER fault_audit AFTER INSERT OR UPDATE OR DELETE ON distlock.jobs
	FOR EACH ROW EXECUTE FUNCTION fault.audit_row();

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
