--
-- direct_fallback: where the table has something only the executor applies
-- (a CHECK constraint, a stored generated column, an inheritance child, an
-- index that is not valid or checks at commit, a NOT NULL on a column a
-- call may empty, a trigger, a rule, forced row security), claims,
-- acknowledgements and lease calls take the SQL path, so that it applies,
-- and say why at DEBUG1; once it is gone, the direct path is back
--
-- This test is about the direct path stepping aside, so it turns the path
-- on in both runs of the suite (with distlock.direct_path off, every call
-- would take the SQL path by the setting, and say nothing).  Only the calls
-- run at DEBUG1: DDL says things of its own there.
SET distlock.direct_path = on;

SELECT distlock.session_open('1 minute', 'fallback') AS f \gset

-- a CHECK constraint is checked
ALTER TABLE distlock.jobs ADD CONSTRAINT one_attempt CHECK (attempts <= 1) NOT VALID;
SELECT distlock.enqueue('chk', '{}') AS c1 \gset
SET client_min_messages = debug1;
SELECT count(*) FROM distlock.claim('chk', :'f');
RESET client_min_messages;
SELECT distlock.fail(:c1, :'f', 'again', '0 seconds');
SELECT attempt(format('count(*) FROM distlock.claim(%L, %L)', 'chk', :'f'));
ALTER TABLE distlock.jobs DROP CONSTRAINT one_attempt;
SELECT attempts FROM distlock.claim('chk', :'f');
SELECT distlock.complete(:c1, :'f');

-- a stored generated column is computed
ALTER TABLE distlock.jobs ADD COLUMN tries_x10 integer
	GENERATED ALWAYS AS (attempts * 10) STORED;
SELECT distlock.enqueue('gen', '{}') AS g1 \gset
SET client_min_messages = debug1;
SELECT attempts, tries_x10 FROM distlock.claim('gen', :'f');
RESET client_min_messages;
SELECT distlock.complete(:g1, :'f');
ALTER TABLE distlock.jobs DROP COLUMN tries_x10;

-- an inheritance child's jobs are claimed, as an UPDATE of the parent
-- would claim them
-- (autovacuum kept off the table meanwhile: its ANALYZE would clear
-- relhassubclass at a time of its choosing)
ALTER TABLE distlock.jobs SET (autovacuum_enabled = off);
CREATE TABLE public.jobs_child () INHERITS (distlock.jobs);
INSERT INTO public.jobs_child (queue, payload, status, priority, run_at,
							   attempts, max_attempts, created_at, created_by,
							   queue_owner)
VALUES ('kid', '{}', 'pending', 0, now(), 0, 1, now(), current_user::regrole,
		current_user::regrole);
SET client_min_messages = debug1;
SELECT queue, status, attempts FROM distlock.claim('kid', :'f');
RESET client_min_messages;
SELECT status FROM public.jobs_child;
DROP TABLE public.jobs_child;
-- the table keeps relhassubclass (and so the SQL path) until an ANALYZE
-- finds no child and clears it
SELECT relhassubclass FROM pg_class WHERE oid = 'distlock.jobs'::regclass;
SELECT distlock.enqueue('kid', '{}') AS k2 \gset
SET client_min_messages = debug1;
SELECT id = :k2 AS claimed FROM distlock.claim('kid', :'f');
RESET client_min_messages;
SELECT distlock.complete(:k2, :'f');
ANALYZE distlock.jobs;
ALTER TABLE distlock.jobs RESET (autovacuum_enabled);
SELECT relhassubclass FROM pg_class WHERE oid = 'distlock.jobs'::regclass;

-- an index that is not valid (and misses a new job) is not walked
UPDATE pg_index SET indisvalid = false, indisready = false
 WHERE indexrelid = 'distlock.jobs_claim_idx'::regclass;
SELECT distlock.enqueue('stale', '{}') AS s1 \gset
SET client_min_messages = debug1;
SELECT id = :s1 AS found FROM distlock.claim('stale', :'f');
RESET client_min_messages;
SELECT distlock.complete(:s1, :'f');
UPDATE pg_index SET indisvalid = true, indisready = true
 WHERE indexrelid = 'distlock.jobs_claim_idx'::regclass;
REINDEX INDEX distlock.jobs_claim_idx;

-- a NOT NULL on result (the one column an acknowledgement may empty) is
-- enforced: completing without a result fails with 23502, with one it
-- completes
BEGIN;
UPDATE distlock.jobs SET result = '{}' WHERE result IS NULL;
ALTER TABLE distlock.jobs ALTER COLUMN result SET DEFAULT '{}';
ALTER TABLE distlock.jobs ALTER COLUMN result SET NOT NULL;
SELECT distlock.enqueue('nn', '{}') AS n1 \gset
SELECT count(*) FROM distlock.claim('nn', :'f');
SET client_min_messages = debug1;
SELECT attempt(format('distlock.complete(%s, %L)', :n1, :'f'));
RESET client_min_messages;
SELECT distlock.complete(:n1, :'f', '{"ok": 1}');
SELECT status, result FROM distlock.jobs WHERE id = :n1;
ROLLBACK;

-- a unique constraint checked at commit is left to the executor, which
-- queues the check
ALTER TABLE distlock.jobs ADD CONSTRAINT jobs_once UNIQUE (id)
	DEFERRABLE INITIALLY DEFERRED;
SELECT distlock.enqueue('once', '{}') AS o1 \gset
SET client_min_messages = debug1;
SELECT id = :o1 AS claimed FROM distlock.claim('once', :'f');
RESET client_min_messages;
SELECT distlock.complete(:o1, :'f');
ALTER TABLE distlock.jobs DROP CONSTRAINT jobs_once;

-- a user's row trigger, and then a rule, apply to the claim and the
-- acknowledgement: each logs both versions
CREATE TABLE public.job_log (id bigint, status text);
CREATE FUNCTION public.log_job() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO public.job_log VALUES (NEW.id, NEW.status);
	RETURN NEW;
END $$;
-- claims queue q's job and completes it (saying why at DEBUG1, if it
-- steps aside), and returns what the log has of it
CREATE FUNCTION public.logged_cycle(q text, sid uuid)
RETURNS TABLE (ours boolean, status text) LANGUAGE plpgsql AS $$
DECLARE
	job bigint;
	claimed bigint;
BEGIN
	SELECT j.id INTO job FROM distlock.jobs j
	 WHERE j.queue = q AND j.status = 'pending';
	SET LOCAL client_min_messages = debug1;
	SELECT c.id INTO claimed FROM distlock.claim(q, sid) c;
	PERFORM distlock.complete(claimed, sid);
	SET LOCAL client_min_messages = notice;
	RETURN QUERY SELECT l.id = job, l.status FROM public.job_log l
				 ORDER BY l.status DESC;
	DELETE FROM public.job_log;
END $$;
CREATE TRIGGER log_job AFTER UPDATE ON distlock.jobs
	FOR EACH ROW EXECUTE FUNCTION public.log_job();
SELECT distlock.enqueue('fb-trig', '{}') IS NOT NULL AS enqueued;
SELECT * FROM public.logged_cycle('fb-trig', :'f');
DROP TRIGGER log_job ON distlock.jobs;
-- (enqueue() fails while the rule is there: core refuses INSERT ... ON
-- CONFLICT on a table with an UPDATE rule, 0A000)
SELECT distlock.enqueue('fb-rule', '{}') IS NOT NULL AS enqueued;
CREATE RULE log_job AS ON UPDATE TO distlock.jobs
	DO ALSO INSERT INTO public.job_log VALUES (NEW.id, NEW.status);
SELECT attempt('distlock.enqueue(''fb-rule'', ''{}'')');
SELECT * FROM public.logged_cycle('fb-rule', :'f');
-- (and so does a claim of several jobs: core refuses a DO ALSO rule in a
-- data-modifying WITH, 0A000)
SELECT attempt(format('count(*) FROM distlock.claim(%L, %L, 2)', 'fb-rule', :'f'));
DROP RULE log_job ON distlock.jobs;
DROP TABLE public.job_log;
DROP FUNCTION public.log_job(), public.logged_cycle(text, uuid);

-- forced row security: the calls' statements run as the schema's owner, a
-- superuser, whom no policy binds, but the executor is left to judge it
ALTER TABLE distlock.jobs FORCE ROW LEVEL SECURITY;
SELECT distlock.enqueue('rls', '{}') AS l1 \gset
SET client_min_messages = debug1;
SELECT id = :l1 AS claimed FROM distlock.claim('rls', :'f');
RESET client_min_messages;
SELECT distlock.complete(:l1, :'f');
ALTER TABLE distlock.jobs NO FORCE ROW LEVEL SECURITY;

-- distlock.locks: a lease call steps aside the same way, for a CHECK
-- constraint and for a NOT NULL on a column a release empties
SELECT distlock.try_acquire('fb-lock', 'alice', '1 minute') > 0 AS granted;
SELECT distlock.release('fb-lock', 'alice');
ALTER TABLE distlock.locks ADD CONSTRAINT no_mallory
	CHECK (owner <> 'mallory') NOT VALID;
SET client_min_messages = debug1;
SELECT attempt('distlock.try_acquire(''fb-lock'', ''mallory'', ''1 minute'')');
SELECT distlock.try_acquire('fb-lock', 'bob', '1 minute') > 0 AS granted;
RESET client_min_messages;
ALTER TABLE distlock.locks DROP CONSTRAINT no_mallory;
BEGIN;
UPDATE distlock.locks SET owner = '' WHERE owner IS NULL;
ALTER TABLE distlock.locks ALTER COLUMN owner SET NOT NULL;
SET LOCAL client_min_messages = debug1;
SELECT attempt('distlock.release(''fb-lock'', ''bob'')');
ROLLBACK;
SET client_min_messages = debug1;
SELECT distlock.release('fb-lock', 'bob');
RESET client_min_messages;

-- all gone: the direct path claims again (nothing said at DEBUG1)
SELECT distlock.enqueue('back', '{}') AS b1 \gset
SET client_min_messages = debug1;
SELECT id = :b1 AS claimed FROM distlock.claim('back', :'f');
SELECT distlock.complete(:b1, :'f');
RESET client_min_messages;
SELECT distlock.session_close(:'f');
