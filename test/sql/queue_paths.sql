--
-- queue_paths: claim() and complete() take the same decisions on the
-- direct path (READ COMMITTED, src/tables.c) and on the SQL path (here
-- forced by a trigger on distlock.jobs, which must fire), and so do
-- complete_batch() and fail(); both paths keep the indexes right
--

CREATE EXTENSION amcheck;
SELECT distlock.session_open('1 minute', 'paths') AS w \gset
CREATE TABLE job_changes (id bigint, old_status text, new_status text);
CREATE FUNCTION record_job_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	-- distlock runs its statements with search_path pg_catalog
	INSERT INTO public.job_changes VALUES (NEW.id, OLD.status, NEW.status);
	RETURN NEW;
END $$;

-- the same round on both paths: claim in order, skip what is not due,
-- complete once, refuse a second time; a batch answers in id order, once
-- per job; a failed job is claimable again; a stays running
CREATE FUNCTION job_round(q text, w uuid) RETURNS TABLE (step text, outcome text)
LANGUAGE plpgsql AS $$
DECLARE
	a bigint := distlock.enqueue(q, '{"n": 1}');
	b bigint := distlock.enqueue(q, '{"n": 2}', priority => 1);
	c bigint := distlock.enqueue(q, '{}', run_at => clock_timestamp() + interval '1 hour');
	d bigint;
	e bigint;
	f bigint;
BEGIN
	RETURN QUERY SELECT 'claim 2', string_agg(format('%s:%s:%s', CASE j.id WHEN a THEN 'a' WHEN b THEN 'b' ELSE 'c' END,
												 j.status, j.attempts), ' ')
	  FROM distlock.claim(q, w, 2) j;
	RETURN QUERY SELECT 'complete b', distlock.complete(b, w, '{"ok": true}')::text;
	RETURN QUERY SELECT 'complete b again', distlock.complete(b, w)::text;
	RETURN QUERY SELECT 'claim none due', count(*)::text FROM distlock.claim(q, w);
	RETURN QUERY SELECT 'b', format('%s %s', status, result) FROM distlock.jobs WHERE id = b;
	d := distlock.enqueue(q, '{"n": 4}');
	e := distlock.enqueue(q, '{"n": 5}');
	RETURN QUERY SELECT 'claim d e', string_agg(CASE j.id WHEN d THEN 'd' WHEN e THEN 'e' ELSE 'other' END, ' ')
	  FROM distlock.claim(q, w, 2) j;
	RETURN QUERY SELECT 'complete_batch e d e b', string_agg(CASE x WHEN d THEN 'd' WHEN e THEN 'e' ELSE 'other' END, ' ' ORDER BY n)
	  FROM distlock.complete_batch(ARRAY[e, d, e, b], w, '{"batch": true}') WITH ORDINALITY AS t(x, n);
	RETURN QUERY SELECT 'complete_batch again', count(*)::text
	  FROM distlock.complete_batch(ARRAY[d, e], w);
	RETURN QUERY SELECT 'd e', string_agg(format('%s %s', status, result), ', ' ORDER BY id)
	  FROM distlock.jobs WHERE id IN (d, e);
	f := distlock.enqueue(q, '{"n": 6}');
	RETURN QUERY SELECT 'claim f', count(*)::text FROM distlock.claim(q, w) j WHERE j.id = f;
	RETURN QUERY SELECT 'fail f', distlock.fail(f, w, 'boom', retry_in => interval '0')::text;
	RETURN QUERY SELECT 'f', format('%s %s %s', status, attempts, last_error) FROM distlock.jobs WHERE id = f;
	RETURN QUERY SELECT 'claim f again', string_agg(format('%s:%s', j.status, j.attempts), ' ')
	  FROM distlock.claim(q, w) j WHERE j.id = f;
	RETURN QUERY SELECT 'complete f', distlock.complete(f, w)::text;
	-- the index entries: a is running for w, nothing pending is due
	RETURN QUERY SELECT 'running for w', count(*)::text FROM distlock.jobs
	  WHERE session_id = w AND status = 'running' AND queue = q;
	RETURN QUERY SELECT 'pending', count(*)::text FROM distlock.jobs
	  WHERE queue = q AND status = 'pending';
	PERFORM distlock.cancel(c);
END $$;

-- direct path: nothing said at DEBUG1, so (with distlock.direct_path on)
-- no call fell back to the SQL path (tables.c: direct_declined())
SET client_min_messages = debug1;
SELECT * FROM job_round('direct', :'w');
RESET client_min_messages;
SELECT count(*) AS trigger_rows FROM job_changes;

-- SQL path: a trigger on distlock.jobs sees every claim and completion
CREATE TRIGGER job_changes AFTER UPDATE ON distlock.jobs
	FOR EACH ROW EXECUTE FUNCTION record_job_change();
SELECT * FROM job_round('sql', :'w');
SELECT old_status, new_status, count(*) FROM job_changes
 GROUP BY 1, 2 ORDER BY 1, 2;
DROP TRIGGER job_changes ON distlock.jobs;

-- the indexes agree with the table after both paths
SET enable_seqscan = off;
SELECT count(*) AS running_by_index FROM distlock.jobs
 WHERE session_id = :'w' AND status = 'running';
RESET enable_seqscan;
SET enable_indexscan = off;
SET enable_bitmapscan = off;
SELECT count(*) AS running_by_scan FROM distlock.jobs
 WHERE session_id = :'w' AND status = 'running';
RESET enable_indexscan;
RESET enable_bitmapscan;
CREATE FUNCTION job_indexes_checked() RETURNS SETOF text LANGUAGE sql AS $$
SELECT i
  FROM unnest(ARRAY['distlock.jobs_pkey', 'distlock.jobs_claim_idx',
					'distlock.jobs_running_session_idx', 'distlock.jobs_dedup_idx',
					'distlock.jobs_finished_idx']) i
 WHERE bt_index_check(i::regclass, true)::text = '' $$;
SELECT job_indexes_checked() AS index_checked;

-- each REINDEX ... CONCURRENTLY gives distlock.jobs' four partial indexes
-- new OIDs: a round after each of two, using twelve partial indexes in all
-- (more than the eight whose predicates a backend keeps, src/tables.c),
-- keeps every index right
REINDEX TABLE CONCURRENTLY distlock.jobs;
SELECT * FROM job_round('reindexed', :'w');
REINDEX TABLE CONCURRENTLY distlock.jobs;
SELECT * FROM job_round('reindexed again', :'w');
SELECT job_indexes_checked() AS index_checked;

-- with distlock.delete_completed an accepted acknowledgement deletes the
-- job instead of completing it, on the same conditions on both paths; a
-- refused one leaves it as it is, and one after the deletion raises 42704
-- as one after the pruning would (and so do fail and cancel)
CREATE FUNCTION deleting_round(q text, w uuid) RETURNS TABLE (step text, outcome text)
LANGUAGE plpgsql AS $$
DECLARE
	a bigint := distlock.enqueue(q, '{"n": 1}');
	b bigint := distlock.enqueue(q, '{"n": 2}');
	c bigint := distlock.enqueue(q, '{"n": 3}');
	d bigint := distlock.enqueue(q, '{"n": 4}');
	e bigint := distlock.enqueue(q, '{"n": 5}');
	f bigint;
	other uuid := distlock.session_open('1 minute', 'other');
BEGIN
	RETURN QUERY SELECT 'claim 3', count(*)::text FROM distlock.claim(q, w, 3);
	RETURN QUERY SELECT 'complete a by another session', distlock.complete(a, other)::text;
	RETURN QUERY SELECT 'a', format('%s %s', status, session_id = w) FROM distlock.jobs WHERE id = a;
	RETURN QUERY SELECT 'complete a', distlock.complete(a, w, '{"ok": true}')::text;
	RETURN QUERY SELECT 'a rows', count(*)::text FROM distlock.jobs WHERE id = a;
	BEGIN
		PERFORM distlock.complete(a, w);
		RETURN QUERY SELECT 'complete a again', 'accepted';
	EXCEPTION WHEN undefined_object THEN
		RETURN QUERY SELECT 'complete a again', SQLSTATE;
	END;
	BEGIN
		PERFORM distlock.complete_and_claim(a, w);
		RETURN QUERY SELECT 'complete_and_claim a', 'accepted';
	EXCEPTION WHEN undefined_object THEN
		RETURN QUERY SELECT 'complete_and_claim a', SQLSTATE;
	END;
	RETURN QUERY SELECT 'complete_batch c b c', string_agg(CASE x WHEN b THEN 'b' WHEN c THEN 'c' ELSE 'other' END, ' ' ORDER BY n)
	  FROM distlock.complete_batch(ARRAY[c, b, c], w) WITH ORDINALITY AS t(x, n);
	RETURN QUERY SELECT 'b c rows', count(*)::text FROM distlock.jobs WHERE id IN (b, c);
	RETURN QUERY SELECT 'claim d', count(*)::text FROM distlock.claim(q, w) j WHERE j.id = d;
	RETURN QUERY SELECT 'complete_and_claim d, claiming e', string_agg((j.id = e)::text, ' ')
	  FROM distlock.complete_and_claim(d, w) j;
	RETURN QUERY SELECT 'complete_batch_and_claim e', count(*)::text
	  FROM distlock.complete_batch_and_claim(ARRAY[e], w);
	RETURN QUERY SELECT 'left', count(*)::text FROM distlock.jobs WHERE queue = q;
	-- a deletion rolled back with its subtransaction leaves the job running
	-- for the session, to be acknowledged again; fail and cancel of a
	-- deleted job find no job
	f := distlock.enqueue(q, '{"n": 6}');
	RETURN QUERY SELECT 'claim f', count(*)::text FROM distlock.claim(q, w) j WHERE j.id = f;
	BEGIN
		PERFORM distlock.complete(f, w);
		RAISE division_by_zero;
	EXCEPTION WHEN division_by_zero THEN
		RETURN QUERY SELECT 'f after a rolled-back deletion', format('%s %s', status, session_id = w)
		  FROM distlock.jobs WHERE id = f;
	END;
	RETURN QUERY SELECT 'complete f', distlock.complete(f, w)::text;
	BEGIN
		PERFORM distlock.fail(f, w);
		RETURN QUERY SELECT 'fail f', 'accepted';
	EXCEPTION WHEN undefined_object THEN
		RETURN QUERY SELECT 'fail f', SQLSTATE;
	END;
	BEGIN
		PERFORM distlock.cancel(f);
		RETURN QUERY SELECT 'cancel f', 'accepted';
	EXCEPTION WHEN undefined_object THEN
		RETURN QUERY SELECT 'cancel f', SQLSTATE;
	END;
	PERFORM distlock.session_close(other);
END $$;
CREATE FUNCTION record_job_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO public.job_changes VALUES (OLD.id, OLD.status, 'deleted');
	RETURN OLD;
END $$;
SET distlock.delete_completed = on;
TRUNCATE job_changes;
SET client_min_messages = debug1;
SELECT * FROM deleting_round('deleting direct', :'w');
RESET client_min_messages;
SELECT count(*) AS trigger_rows FROM job_changes;
CREATE TRIGGER job_deletes AFTER DELETE ON distlock.jobs
	FOR EACH ROW EXECUTE FUNCTION record_job_delete();
SELECT * FROM deleting_round('deleting sql', :'w');
SELECT old_status, new_status, count(*) FROM job_changes
 GROUP BY 1, 2 ORDER BY 1, 2;
DROP TRIGGER job_deletes ON distlock.jobs;
RESET distlock.delete_completed;
-- the setting is the server's, a database's or a role's, not any role's
CREATE ROLE distlock_paths_user;
SET ROLE distlock_paths_user;
SET distlock.delete_completed = on;
RESET ROLE;
DROP ROLE distlock_paths_user;
SELECT job_indexes_checked() AS index_checked;

SELECT distlock.session_close(:'w');
DROP FUNCTION deleting_round(text, uuid);
DROP FUNCTION record_job_delete();
DROP FUNCTION job_round(text, uuid);
DROP FUNCTION job_indexes_checked();
DROP TABLE job_changes;
DROP FUNCTION record_job_change();
DROP EXTENSION amcheck;
