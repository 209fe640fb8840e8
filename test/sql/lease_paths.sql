--
-- lease_paths: try_acquire(), renew() and release() write the same lock
-- rows on the direct path (READ COMMITTED, src/tables.c) and on the SQL
-- path (here forced by a trigger on distlock.locks, which must fire, or
-- by a CHECK constraint, which must be checked); both keep the indexes
-- right
--

CREATE EXTENSION amcheck;
CREATE ROLE lease_paths_a;
CREATE ROLE lease_paths_b;
GRANT USAGE ON SCHEMA distlock TO lease_paths_a, lease_paths_b;
CREATE TABLE lock_changes (name text, old_owner text, new_owner text,
						   same_token boolean);
GRANT INSERT ON lock_changes TO PUBLIC;
CREATE FUNCTION record_lock_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	-- distlock runs its statements with search_path pg_catalog
	INSERT INTO public.lock_changes
		VALUES (NEW.name, OLD.owner, NEW.owner, NEW.token = OLD.token);
	RETURN NEW;
END $$;

-- the same round on both paths, the lock row after each step: a first
-- grant, a re-entry (same token and acquired_at; min_hold counted from
-- acquired_at), a renewal, a release, a grant to another owner of
-- another role (a new token, a new created_by), and its release
CREATE FUNCTION lease_round(l text) RETURNS TABLE (step text, outcome text)
LANGUAGE plpgsql AS $$
DECLARE
	t1 bigint;
	t2 bigint;
	t3 bigint;
	acq timestamptz;
BEGIN
	SET LOCAL ROLE lease_paths_a;
	t1 := distlock.try_acquire(l, 'o1', '1 minute');
	RESET ROLE;
	SELECT acquired_at INTO acq FROM distlock.locks WHERE name = l;
	RETURN QUERY SELECT 'grant', format('%s %s %s %s', t1 IS NOT NULL, owner,
		expires_at - renewed_at, created_by) FROM distlock.locks WHERE name = l;
	PERFORM pg_sleep(0.01);
	SET LOCAL ROLE lease_paths_a;
	t2 := distlock.try_acquire(l, 'o1', '2 minutes', min_hold => '1 hour');
	RESET ROLE;
	RETURN QUERY SELECT 're-entry', format('%s %s %s %s %s', t2 = t1,
		acquired_at = acq, renewed_at > acq, expires_at - renewed_at,
		hold_until - acq) FROM distlock.locks WHERE name = l;
	-- a second re-entry without min_hold drops the hold
	SET LOCAL ROLE lease_paths_a;
	t2 := distlock.try_acquire(l, 'o1', '2 minutes');
	RESET ROLE;
	RETURN QUERY SELECT 're-entry without hold', format('%s %s', t2 = t1,
		hold_until IS NULL) FROM distlock.locks WHERE name = l;
	SET LOCAL ROLE lease_paths_a;
	RETURN QUERY SELECT 'renew', distlock.renew(l, 'o1', NULL)::text;
	RESET ROLE;
	RETURN QUERY SELECT 'renewed', format('%s %s %s', token = t1,
		expires_at IS NULL, acquired_at = acq) FROM distlock.locks WHERE name = l;
	SET LOCAL ROLE lease_paths_a;
	RETURN QUERY SELECT 'release', distlock.release(l, 'o1')::text;
	RETURN QUERY SELECT 'release again', distlock.release(l, 'o1')::text;
	RESET ROLE;
	RETURN QUERY SELECT 'released', format('%s %s %s %s', owner IS NULL,
		session_id IS NULL, expires_at IS NULL, token = t1)
	  FROM distlock.locks WHERE name = l;
	SET LOCAL ROLE lease_paths_b;
	t3 := distlock.try_acquire(l, 'o2', '1 minute', min_hold => '1 second');
	RESET ROLE;
	RETURN QUERY SELECT 'other owner', format('%s %s %s %s', t3 > t1, owner,
		created_by, hold_until - acquired_at) FROM distlock.locks WHERE name = l;
	SET LOCAL ROLE lease_paths_b;
	RETURN QUERY SELECT 'release o2', distlock.release(l, 'o2')::text;
	RESET ROLE;
END $$;

-- direct path: nothing said at DEBUG1, so (with distlock.direct_path on)
-- no call fell back to the SQL path (tables.c: direct_declined())
SET client_min_messages = debug1;
SELECT * FROM lease_round('direct');
RESET client_min_messages;
SELECT count(*) AS trigger_rows FROM lock_changes;

-- SQL path: a trigger on distlock.locks sees every grant, renewal and
-- release but the first grant's insert
CREATE TRIGGER lock_changes AFTER UPDATE ON distlock.locks
	FOR EACH ROW EXECUTE FUNCTION record_lock_change();
SELECT * FROM lease_round('sql');
DROP TRIGGER lock_changes ON distlock.locks;
SELECT old_owner, new_owner, same_token, count(*) FROM lock_changes
 GROUP BY 1, 2, 3 ORDER BY 1, 2, 3;

-- a CHECK constraint is checked, so the SQL path ran
ALTER TABLE distlock.locks ADD CONSTRAINT short_leases
	CHECK (expires_at IS NOT NULL) NOT VALID;
SELECT distlock.try_acquire('checked', 'o3', '1 minute') IS NOT NULL AS granted;
SELECT attempt($$distlock.renew('checked', 'o3', NULL)$$);
ALTER TABLE distlock.locks DROP CONSTRAINT short_leases;
SELECT distlock.renew('checked', 'o3', NULL);
SELECT distlock.release('checked', 'o3');

-- a NOT NULL on a column a release empties is checked (the direct path
-- steps aside; with no lock rows, the constraint can be added)
BEGIN;
DELETE FROM distlock.locks;
ALTER TABLE distlock.locks ALTER COLUMN owner SET NOT NULL;
SELECT distlock.try_acquire('not-null', 'o4', '1 minute') IS NOT NULL AS granted;
SELECT attempt($$distlock.release('not-null', 'o4')$$);
ROLLBACK;

-- the indexes agree with the table after both paths
SET enable_seqscan = off;
SELECT created_by, count(*) AS by_index FROM distlock.locks
 WHERE created_by IN ('lease_paths_a'::regrole, 'lease_paths_b'::regrole)
 GROUP BY 1 ORDER BY 1;
SELECT name FROM distlock.locks WHERE name IN ('direct', 'sql', 'checked')
 ORDER BY 1;
RESET enable_seqscan;
SELECT i AS index_checked
  FROM unnest(ARRAY['distlock.locks_pkey', 'distlock.locks_created_by_idx']) i
 WHERE bt_index_check(i::regclass, true)::text = '';

DELETE FROM distlock.locks WHERE name IN ('direct', 'sql', 'checked');
DROP FUNCTION lease_round(text);
DROP TABLE lock_changes;
DROP FUNCTION record_lock_change();
REVOKE USAGE ON SCHEMA distlock FROM lease_paths_a, lease_paths_b;
DROP ROLE lease_paths_a;
DROP ROLE lease_paths_b;
DROP EXTENSION amcheck;
