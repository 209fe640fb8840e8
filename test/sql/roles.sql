--
-- roles: a role acts only on the locks, sessions and jobs of roles whose
-- privileges it has; everything else is refused and unchanged: with 42501,
-- or for leases as for another owner (false, 55000)
--

CREATE ROLE tenant_a;
CREATE ROLE tenant_b;
CREATE ROLE tenant_admin;
CREATE ROLE tenant_a_worker;
GRANT tenant_a, tenant_b TO tenant_admin;
GRANT tenant_a TO tenant_a_worker;
GRANT USAGE ON SCHEMA distlock TO tenant_a, tenant_b, tenant_admin, tenant_a_worker;

-- what the functions need and nothing more: no table privileges
SELECT has_table_privilege('tenant_a', 'distlock.jobs', 'SELECT') AS can_read_jobs,
	   has_function_privilege('tenant_a', 'distlock.claim(text, uuid, integer, regrole)', 'EXECUTE') AS can_claim;

-- tenant a: a session, a session-bound lock, a claimed job and a pending one
SET ROLE tenant_a;
SELECT distlock.session_open('1 hour', 'a') AS sa \gset
SELECT distlock.try_acquire('a-lock', 'a-owner', '1 hour', :'sa') AS ta \gset
SELECT distlock.enqueue('shared', '{"secret": "a1"}', dedup_key => 'a-key') AS ja \gset
SELECT distlock.enqueue('shared', '{"secret": "a2"}') AS ja2 \gset
SELECT id = :ja AS claimed_own FROM distlock.claim('shared', :'sa');
SELECT name, owner FROM distlock.active_locks;
RESET ROLE;

CREATE TEMP TABLE ids AS
	SELECT :'sa'::uuid AS sa, :ta::bigint AS ta, :ja::bigint AS ja, :ja2::bigint AS ja2;
GRANT SELECT ON ids TO PUBLIC;
CREATE FUNCTION bind(call text) RETURNS text LANGUAGE sql AS $$
	SELECT replace(replace(replace(replace(call,
		'<sa>', quote_literal(sa)), '<ta>', ta::text),
		'<ja>', ja::text), '<ja2>', ja2::text)
	  FROM ids
$$;
-- what EXPLAIN ANALYZE prints of a query
CREATE FUNCTION explain_lines(q text) RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE l text;
BEGIN
	FOR l IN EXECUTE 'EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) ' || q LOOP
		RETURN NEXT l;
	END LOOP;
END $$;
-- tenant b, on the same connection: every act on a's objects is refused
SET ROLE tenant_b;
SELECT distlock.session_open('1 hour', 'b') AS sb \gset
RESET ROLE;
SELECT state() AS before \gset
SET ROLE tenant_b;
SELECT call, attempt(bind(call)) AS outcome FROM (VALUES
	('distlock.fence(''a-lock'', <ta>)'),
	('distlock.try_acquire(''b-lock'', ''b'', ''1 minute'', <sa>)'),
	('distlock.heartbeat(<sa>)'),
	('distlock.session_close(<sa>)'),
	('distlock.claim(''shared'', <sa>)'),
	('distlock.complete(<ja>, <sa>)'),
	('distlock.complete_and_claim(<ja>, <sa>)'),
	('distlock.complete_batch(ARRAY[<ja>], <sa>)'),
	('distlock.complete_batch_and_claim(ARRAY[<ja>], <sa>)'),
	('distlock.fail(<ja>, <sa>)'),
	('distlock.cancel(<ja>)'),
	('distlock.cancel(<ja2>)'),
	('distlock.enqueue(''shared'', ''{}'', dedup_key => ''a-key'', owner => ''tenant_a'')'),
	('distlock.enqueue(''shared'', ''{}'', owner => ''tenant_a'')'),
	('count(*) FROM distlock.jobs'),
	('count(*) FROM distlock.locks'),
	('count(*) FROM distlock.sessions')
) v(call);
-- through b's own session, a's job is no job
SELECT attempt(format('distlock.complete_batch_and_claim(ARRAY[%s], %L)', :ja, :'sb')) AS a_job_in_b_batch;
-- a's owner string does not let b re-enter a's lease, nor renew or
-- release it: another role's lease is another owner's
SELECT distlock.try_acquire('a-lock', 'a-owner') IS NULL AS refused;
SELECT distlock.renew('a-lock', 'a-owner') AS renewed,
	   distlock.renew('a-lock', 'b') AS renewed_b,
	   distlock.release('a-lock', 'a-owner') AS released,
	   distlock.release('a-lock', 'b') AS released_b;
-- b's queue 'shared' is b's own, without a's jobs, and b may not claim
-- from a's; to b's acknowledgement a's job is no job, as an id that never
-- was one: whether a's job exists is not b's to know
SELECT count(*) AS claimed FROM distlock.claim('shared', :'sb');
SELECT attempt(format('distlock.claim(%L, %L, owner => %L)', 'shared', :'sb', 'tenant_a')) AS claim_from_a;
SELECT attempt(format('distlock.complete(%s, %L)', :ja2, :'sb'))
	   = replace(attempt(format('distlock.complete(%s, %L)', 1000000, :'sb')),
				 '1000000', :'ja2') AS same_as_no_job;
-- the views show b only its own rows
SELECT (SELECT count(*) FROM distlock.active_locks) AS locks,
	   (SELECT count(*) FROM distlock.live_sessions) AS sessions,
	   (SELECT count(*) FROM distlock.queue_stats) AS queues;
-- ... by the rule visible() states, which is b's, not the rows' creator's
SELECT distlock.visible('tenant_a') AS sees_a,
	   distlock.visible('tenant_b') AS sees_b;
-- ... and EXPLAIN ANALYZE of them does not count the rows b may not see
SELECT v, bool_or(l ~ 'Removed') AS tells_removed
  FROM unnest(ARRAY['live_sessions', 'active_locks', 'queue_stats']) v,
	   explain_lines('SELECT * FROM distlock.' || v) l
 GROUP BY v ORDER BY v;
UPDATE distlock.jobs SET status = 'cancelled';
RESET ROLE;
SELECT state() = :'before' AS unchanged;

-- a takeover by another role of a lapsed lease: the old holder's renew
-- and release return false and its fence raises 55000, as after a takeover
-- within one role, whatever owner string the new holder chose
SET ROLE tenant_b;
SELECT set_config('roles.tb', distlock.try_acquire('lapse', 'same', '1 ms')::text, false) IS NOT NULL AS b_holds;
SELECT pg_sleep(0.01);
SET ROLE tenant_a;
SELECT distlock.try_acquire('lapse', 'same', '1 hour') > current_setting('roles.tb')::bigint AS a_took_over;
SET ROLE tenant_b;
SELECT distlock.renew('lapse', 'same') AS renewed,
	   distlock.release('lapse', 'same') AS released;
DO $$ BEGIN PERFORM distlock.fence('lapse', current_setting('roles.tb')::bigint);
EXCEPTION WHEN OTHERS THEN RAISE NOTICE 'fence: %', SQLSTATE; END $$;
RESET ROLE;
SELECT owner, created_by FROM distlock.locks WHERE name = 'lapse';
DELETE FROM distlock.locks WHERE name = 'lapse';

-- a member of tenant_a acts for it: a worker role processing a's jobs
SET ROLE tenant_a_worker;
SELECT distlock.session_open('1 hour', 'a-worker') AS sw \gset
SELECT id = :ja2 AS got_a2, payload
  FROM distlock.claim('shared', :'sw', owner => 'tenant_a');
SELECT distlock.complete(:ja2, :'sw');
SELECT distlock.heartbeat(:'sa') AS heartbeat_for_a;
RESET ROLE;

-- an administrator (member of both) acts on both; superusers on everything
SET ROLE tenant_admin;
SELECT distlock.renew('a-lock', 'a-owner', '2 hours');
SELECT count(*) AS sessions FROM distlock.live_sessions;
SELECT queue, running, completed FROM distlock.queue_stats;
SELECT distlock.complete(:ja, :'sa');
RESET ROLE;
SELECT distlock.release('a-lock', 'a-owner');

-- and back to a: a sees its own jobs, finished by its worker and admin
SET ROLE tenant_a;
SELECT queue, pending, running, completed FROM distlock.queue_stats;
SELECT distlock.session_close(:'sa');
RESET ROLE;

-- clean up: rows of the roles, then the roles
SELECT distlock.session_close(id) FROM distlock.sessions
 WHERE created_by::text IN ('tenant_b', 'tenant_a_worker');
DELETE FROM distlock.jobs WHERE queue = 'shared';
DELETE FROM distlock.locks WHERE name = 'a-lock';
DROP FUNCTION bind(text);
DROP FUNCTION explain_lines(text);
DROP TABLE ids;
REVOKE USAGE ON SCHEMA distlock FROM tenant_a, tenant_b, tenant_admin, tenant_a_worker;
DROP ROLE tenant_a_worker, tenant_admin, tenant_a, tenant_b;
