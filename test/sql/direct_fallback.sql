--
-- direct_fallback: where the table has something only the executor applies
-- (a CHECK constraint, a stored generated column, an inheritance child, an
-- index that is not valid), claims and acknowledgements take the SQL path,
-- so that it applies; once it is gone, the direct path is back
--

SELECT distlock.session_open('1 minute', 'fallback') AS f \gset

-- a CHECK constraint is checked
ALTER TABLE distlock.jobs ADD CONSTRAINT one_attempt CHECK (attempts <= 1) NOT VALID;
SELECT distlock.enqueue('chk', '{}') AS c1 \gset
SELECT count(*) FROM distlock.claim('chk', :'f');
SELECT distlock.fail(:c1, :'f', 'again', '0 seconds');
SELECT attempt(format('count(*) FROM distlock.claim(%L, %L)', 'chk', :'f'));
ALTER TABLE distlock.jobs DROP CONSTRAINT one_attempt;
SELECT attempts FROM distlock.claim('chk', :'f');
SELECT distlock.complete(:c1, :'f');

-- a stored generated column is computed
ALTER TABLE distlock.jobs ADD COLUMN tries_x10 integer
	GENERATED ALWAYS AS (attempts * 10) STORED;
SELECT distlock.enqueue('gen', '{}') AS g1 \gset
SELECT attempts, tries_x10 FROM distlock.claim('gen', :'f');
SELECT distlock.complete(:g1, :'f');
ALTER TABLE distlock.jobs DROP COLUMN tries_x10;

-- an inheritance child's jobs are claimed, as an UPDATE of the parent
-- would claim them
CREATE TABLE public.jobs_child () INHERITS (distlock.jobs);
INSERT INTO public.jobs_child (queue, payload, status, priority, run_at,
							   attempts, max_attempts, created_at, created_by,
							   queue_owner)
VALUES ('kid', '{}', 'pending', 0, now(), 0, 1, now(), current_user::regrole,
		current_user::regrole);
SELECT queue, status, attempts FROM distlock.claim('kid', :'f');
SELECT status FROM public.jobs_child;
DROP TABLE public.jobs_child;
-- the table keeps relhassubclass (and so the SQL path) until an ANALYZE
-- finds no child and clears it
SELECT relhassubclass FROM pg_class WHERE oid = 'distlock.jobs'::regclass;
ANALYZE distlock.jobs;
SELECT relhassubclass FROM pg_class WHERE oid = 'distlock.jobs'::regclass;

-- an index that is not valid (and misses a new job) is not walked
UPDATE pg_index SET indisvalid = false, indisready = false
 WHERE indexrelid = 'distlock.jobs_claim_idx'::regclass;
SELECT distlock.enqueue('stale', '{}') AS s1 \gset
SELECT id = :s1 AS found FROM distlock.claim('stale', :'f');
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
SELECT attempt(format('distlock.complete(%s, %L)', :n1, :'f'));
SELECT distlock.complete(:n1, :'f', '{"ok": 1}');
SELECT status, result FROM distlock.jobs WHERE id = :n1;
ROLLBACK;

-- all gone: the direct path claims again (nothing said at DEBUG1)
SELECT distlock.enqueue('back', '{}') AS b1 \gset
SET client_min_messages = debug1;
SELECT id = :b1 AS claimed FROM distlock.claim('back', :'f');
SELECT distlock.complete(:b1, :'f');
RESET client_min_messages;
SELECT distlock.session_close(:'f');
