--
-- limits: per-role limits on sessions, throttles, lock names and stored
-- sizes, set by
-- administrators, refused with 53400 (counts) and 54000 (sizes)
--

CREATE ROLE lim_app;
CREATE ROLE lim_other;
GRANT USAGE ON SCHEMA distlock TO lim_app, lim_other;

-- only administrators set them, to sane values
SET ROLE lim_app;
SELECT attempt('distlock.set_limit(''sessions'', 100000)');
RESET ROLE;
SELECT attempt('distlock.set_limit(''rows'', 5)');
SELECT attempt('distlock.set_limit(''payload'', 100)');
SELECT attempt('distlock.set_limit(''sessions'', -1, ''lim_app'')');
SELECT attempt('distlock.set_limit(NULL, 5)');
-- the bounds themselves are accepted: no sessions at all, a 1 kB payload
BEGIN;
SELECT distlock.set_limit('sessions', 0, 'lim_other'),
	   distlock.set_limit('payload', 1024, 'lim_other');
SET LOCAL ROLE lim_other;
SELECT attempt('distlock.session_open(''1 hour'')');
SELECT attempt(format('distlock.enqueue(''lim'', %L)',
					  jsonb_build_object('x', repeat('x', 1100))));
ROLLBACK;
SELECT distlock.set_limit('sessions', 2, 'lim_app');
SELECT distlock.set_limit('throttles', 1, 'lim_app');
SELECT distlock.set_limit('payload', 2048, 'lim_app');
SELECT distlock.set_limit('locks', 2, 'lim_app');
SELECT distlock.set_limit('grants', 1, 'lim_app');
SELECT * FROM distlock.limits ORDER BY role::text;

-- sessions: the third is refused until one ends; another role is not held
-- to lim_app's limit
SET ROLE lim_app;
SELECT distlock.session_open('1 hour') AS s1 \gset
SELECT distlock.session_open('1 hour') AS s2 \gset
SELECT attempt('distlock.session_open(''1 hour'')');
SELECT distlock.session_close(:'s2');
SELECT distlock.session_open('1 hour') IS NOT NULL AS opened_again;
-- a dead session not yet reaped is not one more: at its limit, a role's
-- session_open reaps the role's own expired sessions first, handing their
-- jobs back, or failing those out of attempts (at READ COMMITTED; at
-- REPEATABLE READ it is refused as before)
RESET ROLE;
SELECT id AS s2b FROM distlock.sessions
 WHERE created_by = 'lim_app'::regrole AND id <> :'s1' \gset
SET ROLE lim_app;
SELECT distlock.enqueue('dead', '{}') AS dj \gset
SELECT distlock.enqueue('dead', '{}', max_attempts => 1) AS dj1 \gset
SELECT count(*) AS claimed FROM distlock.claim('dead', :'s2b', 2);
RESET ROLE;
UPDATE distlock.sessions SET expires_at = clock_timestamp() - interval '1 second'
 WHERE id = :'s2b';
BEGIN ISOLATION LEVEL REPEATABLE READ;
SET LOCAL ROLE lim_app;
SELECT attempt('distlock.session_open(''1 hour'')');
ROLLBACK;
SET ROLE lim_app;
SELECT distlock.session_open('1 hour') IS NOT NULL AS opened_past_dead;
RESET ROLE;
SELECT count(*) AS dead_left FROM distlock.sessions WHERE id = :'s2b';
SELECT id = :dj AS dj, status, session_id IS NULL AS unclaimed, attempts,
	   last_error, finished_at IS NOT NULL AS finished
  FROM distlock.jobs WHERE id IN (:dj, :dj1) ORDER BY id;
SELECT count(*) AS lim_app_sessions FROM distlock.sessions
 WHERE created_by = 'lim_app'::regrole;
SET ROLE lim_app;
SELECT attempt('distlock.session_open(''1 hour'')');
SET ROLE lim_other;
SELECT count(distlock.session_open('1 hour')) AS other_opens FROM generate_series(1, 3);
RESET ROLE;

-- the default row applies to every role without its own
SELECT distlock.set_limit('sessions', 3);
SET ROLE lim_other;
SELECT attempt('distlock.session_open(''1 hour'')');
RESET ROLE;
SELECT distlock.set_limit('sessions', NULL);
SET ROLE lim_other;
SELECT distlock.session_open('1 hour') IS NOT NULL AS builtin_default_again;
RESET ROLE;

-- throttles: a new one is refused, an existing one still draws
SET ROLE lim_app;
SELECT distlock.throttle('t1', '1 second', 5);
SELECT attempt('distlock.throttle(''t2'', ''1 second'')');
SELECT distlock.throttle('t1', '1 second', 5) AS existing_draws;
RESET ROLE;

-- lock names: a third name's first grant is refused; the names it has
-- are granted again, released or not, and a name another role created
-- may be taken over
SET ROLE lim_other;
SELECT distlock.try_acquire('other-name', 'o', '1 ms') IS NOT NULL AS other_granted;
SET ROLE lim_app;
SELECT distlock.try_acquire('n1', 'a', '1 hour') IS NOT NULL AS n1,
	   distlock.try_acquire('n2', 'a', '1 hour') IS NOT NULL AS n2;
SELECT attempt('distlock.try_acquire(''n3'', ''a'', ''1 hour'')');
SELECT count(*) AS names FROM distlock.active_locks;
SELECT distlock.release('n2', 'a');
SELECT distlock.try_acquire('n2', 'a', '1 hour') IS NOT NULL AS n2_again;
SELECT pg_sleep(0.01);
SELECT distlock.try_acquire('other-name', 'a', '1 hour') IS NOT NULL AS taken_over;
RESET ROLE;

-- queue grants: a second grant is refused; the first can still change
SET ROLE lim_app;
SELECT distlock.grant_queue('gq', 'enqueue', 'lim_other');
SELECT attempt('distlock.grant_queue(''gq'', ''claim'', ''lim_app'')');
SELECT distlock.grant_queue('gq', 'claim', 'lim_other');
SELECT enqueue, claim, manage FROM distlock.queue_grants WHERE owner = 'lim_app'::regrole;
RESET ROLE;

-- sizes: payload, result, session info and error text over the limit are
-- refused; at the limit they are stored
SET ROLE lim_app;
SELECT attempt('distlock.enqueue(''lq'', jsonb_build_object(''x'', repeat(''x'', 3000)))');
SELECT attempt('distlock.session_open(''1 hour'', ''o'', jsonb_build_object(''x'', repeat(''x'', 3000)))');
SELECT distlock.enqueue('lq', jsonb_build_object('x', repeat('x', 1500))) AS lj \gset
SELECT count(*) FROM distlock.claim('lq', :'s1');
SELECT attempt(format('distlock.complete(%s, %L, jsonb_build_object(''x'', repeat(''x'', 3000)))', :lj, :'s1'));
SELECT attempt(format('distlock.fail(%s, %L, repeat(''e'', 3000))', :lj, :'s1'));
SELECT distlock.complete(:lj, :'s1', jsonb_build_object('x', repeat('x', 1500))) AS completed;
SET ROLE lim_other;
SELECT attempt('distlock.enqueue(''lq'', jsonb_build_object(''x'', repeat(''x'', 1100000)))');
SELECT distlock.enqueue('lq', jsonb_build_object('x', repeat('x', 3000))) > 0 AS other_enqueues;
RESET ROLE;

-- a role clearing out its own rows keeps its limits: only an
-- administrator's drop_owned() removes them
SET ROLE lim_app;
SELECT sessions, throttles FROM distlock.drop_owned('lim_app');
SELECT distlock.throttle('t2', '1 second') AS first_throttle_again;
SELECT attempt('distlock.throttle(''t3'', ''1 second'')');
RESET ROLE;
SELECT max_sessions, max_throttles, max_payload, max_locks, max_grants
  FROM distlock.limits WHERE role = 'lim_app'::regrole;

-- a role that moves its rows to a group it belongs to cannot pass the
-- group's limit that way (an administrator may: it sets the limits)
CREATE ROLE lim_group;
CREATE ROLE lim_member IN ROLE lim_group;
GRANT USAGE ON SCHEMA distlock TO lim_member;
SELECT distlock.set_limit('sessions', 2, 'lim_group'),
	   distlock.set_limit('sessions', 2, 'lim_member');
SET ROLE lim_member;
SELECT count(distlock.session_open('1 hour')) FROM generate_series(1, 2);
SELECT sessions FROM distlock.reassign_owned('lim_member', 'lim_group');
SELECT count(distlock.session_open('1 hour')) FROM generate_series(1, 2);
SELECT attempt('distlock.reassign_owned(''lim_member'', ''lim_group'')');
RESET ROLE;
SELECT created_by, count(*) FROM distlock.sessions
 WHERE created_by::text IN ('lim_member', 'lim_group') GROUP BY 1 ORDER BY 1;
SELECT sessions FROM distlock.reassign_owned('lim_member', 'lim_group');
SELECT sessions FROM distlock.drop_owned('lim_group');
REVOKE USAGE ON SCHEMA distlock FROM lim_member;
DROP ROLE lim_member, lim_group;

-- a fleet whose sessions died: at its limit, session_open reaps them in
-- batches until the role is below it, but not when its live sessions
-- alone fill it (the reaping would be undone with the refusal, and done
-- again at every retry), and never another role's
CREATE ROLE lim_fleet;
GRANT USAGE ON SCHEMA distlock TO lim_fleet;
SET ROLE lim_fleet;
SELECT count(distlock.session_open('1 hour')) AS fleet FROM generate_series(1, 350);
SET ROLE lim_other;
SELECT distlock.session_open('1 hour') AS os \gset
SELECT distlock.enqueue('oq', '{}') AS oj \gset
SELECT count(*) AS other_claimed FROM distlock.claim('oq', :'os');
RESET ROLE;
UPDATE distlock.sessions SET expires_at = clock_timestamp() - interval '1 hour'
 WHERE id = :'os';
UPDATE distlock.sessions SET expires_at = clock_timestamp() - interval '1 second'
 WHERE id IN (SELECT id FROM distlock.sessions
			   WHERE created_by = 'lim_fleet'::regrole ORDER BY id LIMIT 300);
SELECT distlock.set_limit('sessions', 50, 'lim_fleet');
BEGIN;
SELECT pg_stat_get_xact_tuples_deleted('distlock.sessions'::regclass) AS del0 \gset
SET LOCAL ROLE lim_fleet;
SELECT attempt('distlock.session_open(''1 hour'')');
SELECT pg_stat_get_xact_tuples_deleted('distlock.sessions'::regclass) - :del0
	   AS reaped_in_vain;
ROLLBACK;
-- two batches make room under 160, one more under 100
CREATE FUNCTION pg_temp.fleet(OUT fleet_rows bigint, OUT fleet_dead bigint)
LANGUAGE sql AS $$
SELECT count(*), count(*) FILTER (WHERE expires_at <= clock_timestamp())
  FROM distlock.sessions WHERE created_by = 'lim_fleet'::regrole
$$;
SELECT distlock.set_limit('sessions', 160, 'lim_fleet');
SET ROLE lim_fleet;
SELECT distlock.session_open('1 hour') IS NOT NULL AS fleet_opened;
RESET ROLE;
SELECT * FROM pg_temp.fleet();
SELECT distlock.set_limit('sessions', 100, 'lim_fleet');
SET ROLE lim_fleet;
SELECT distlock.session_open('1 hour') IS NOT NULL AS fleet_opened;
RESET ROLE;
SELECT * FROM pg_temp.fleet();
SELECT s.id IS NOT NULL AS other_session_kept, j.status
  FROM distlock.jobs j LEFT JOIN distlock.sessions s ON s.id = j.session_id
 WHERE j.id = :oj;
DELETE FROM distlock.jobs WHERE id = :oj;
DELETE FROM distlock.sessions WHERE id = :'os';
-- the walk goes past a whole batch it may not reap: sessions this
-- transaction uses (each has claimed through one), first in the walk's
-- order; the others expire later at the same instant, so that the next
-- batch starts on a tie, which the walk breaks on id
SELECT distlock.set_limit('sessions', 252, 'lim_fleet');
BEGIN;
SET LOCAL statement_timeout = '20s';
SET LOCAL ROLE lim_fleet;
CREATE TEMP TABLE fleet_new ON COMMIT DROP AS
	SELECT distlock.session_open('1 hour') AS id FROM generate_series(1, 200);
CREATE TEMP TABLE fleet_used ON COMMIT DROP AS
	SELECT id FROM fleet_new ORDER BY id LIMIT 100;
CREATE TEMP TABLE fleet_more ON COMMIT DROP AS
	SELECT id FROM fleet_new EXCEPT SELECT id FROM fleet_used;
SELECT count(*) AS used_claimed
  FROM fleet_used, LATERAL distlock.claim('empty', fleet_used.id) c;
RESET ROLE;
UPDATE distlock.sessions SET expires_at = now() - interval '2 seconds'
 WHERE id IN (SELECT id FROM fleet_used);
-- only sessions in use have expired: refused; then, within a second of
-- that walk in vain, refused without walking again (in one function, so
-- that a slow server does not pass the second first)
CREATE FUNCTION pg_temp.vain_then_backoff() RETURNS SETOF text
LANGUAGE plpgsql AS $$
BEGIN
	SET LOCAL ROLE lim_fleet;
	RETURN NEXT attempt('distlock.session_open(''1 hour'')');
	RESET ROLE;
	UPDATE distlock.sessions SET expires_at = now() - interval '2 seconds'
	 WHERE id IN (SELECT id FROM fleet_more);
	SET LOCAL ROLE lim_fleet;
	RETURN NEXT attempt('distlock.session_open(''1 hour'')');
	RESET ROLE;
END $$;
SELECT * FROM pg_temp.vain_then_backoff();
SET LOCAL ROLE lim_fleet;
SELECT pg_sleep(1.1);
SELECT distlock.session_open('1 hour') IS NOT NULL AS fleet_opened;
RESET ROLE;
SELECT count(*) FILTER (WHERE id IN (SELECT id FROM fleet_used)) AS used_kept,
	   count(*) FILTER (WHERE id IN (SELECT id FROM fleet_more)) AS more_left,
	   count(*) AS fleet_rows
  FROM distlock.sessions WHERE created_by = 'lim_fleet'::regrole;
COMMIT;
SELECT sessions FROM distlock.drop_owned('lim_fleet');
REVOKE USAGE ON SCHEMA distlock FROM lim_fleet;
DROP ROLE lim_fleet;

-- clean up
SELECT * FROM distlock.drop_owned('lim_app');
SELECT * FROM distlock.drop_owned('lim_other');
DELETE FROM distlock.limits;
REVOKE USAGE ON SCHEMA distlock FROM lim_app, lim_other;
DROP ROLE lim_app, lim_other;
