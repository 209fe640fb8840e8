--
-- admin: a role's rows before DROP ROLE (reassign_owned, drop_owned), and
-- maintain() for administrators only
--

CREATE ROLE admin_app;
CREATE ROLE admin_heir;
CREATE ROLE admin_other;
GRANT USAGE ON SCHEMA distlock TO admin_app, admin_heir, admin_other;

-- admin_app: a session with a held, session-bound lease and a claimed job,
-- a plain lease, a pending job, a throttle
SET ROLE admin_app;
SELECT distlock.session_open('1 hour', 'app') AS s \gset
SELECT distlock.try_acquire('app-bound', 'app', '1 hour', :'s') IS NOT NULL AS bound;
SELECT distlock.try_acquire('app-lock', 'app', '1 hour') IS NOT NULL AS plain;
SELECT distlock.enqueue('app-q', '{"n": 1}') AS j1 \gset
SELECT distlock.enqueue('app-q', '{"n": 2}') AS j2 \gset
SELECT count(*) AS claimed FROM distlock.claim('app-q', :'s');
SELECT distlock.throttle('app-t', '1 hour') AS throttled;

-- only a role with admin_app's privileges may touch its rows
SET ROLE admin_other;
SELECT attempt('distlock.drop_owned(''admin_app'')');
SELECT attempt('distlock.reassign_owned(''admin_app'', ''admin_other'')');
SELECT attempt('distlock.maintain()');
SELECT attempt('distlock.drop_owned(NULL)');
-- nor give its own rows to admin_app: its jobs would land in admin_app's
-- queue (a flood the queue's grants keep out), its sessions and locks
-- would count against admin_app's limits
SELECT distlock.enqueue('app-q', '{"junk": 1}') AS junk \gset
SELECT attempt('distlock.reassign_owned(''admin_other'', ''admin_app'')');
RESET ROLE;
SELECT created_by, queue_owner FROM distlock.jobs WHERE id = :junk;
SELECT jobs FROM distlock.drop_owned('admin_other');
SELECT attempt('distlock.reassign_owned(''admin_app'', 12345::oid::regrole)');

-- reassign: every row is admin_heir's now, and admin_app's calls are
-- another role's
SELECT * FROM distlock.reassign_owned('admin_app', 'admin_heir');
SELECT (SELECT count(*) FROM distlock.sessions WHERE created_by = 'admin_app'::regrole)
	 + (SELECT count(*) FROM distlock.locks WHERE created_by = 'admin_app'::regrole)
	 + (SELECT count(*) FROM distlock.jobs WHERE created_by = 'admin_app'::regrole)
	 + (SELECT count(*) FROM distlock.throttles WHERE owner = 'admin_app'::regrole) AS left_to_app;
SET ROLE admin_app;
SELECT distlock.renew('app-lock', 'app', '1 hour') AS app_renews;
SET ROLE admin_heir;
SELECT distlock.renew('app-lock', 'app', '1 hour') AS heir_renews,
	   distlock.heartbeat(:'s') AS heir_beats;
SELECT available FROM distlock.throttle_status('app-t');
RESET ROLE;

-- drop: the session ends (its job goes back to pending, then is deleted),
-- its leases and jobs are deleted, and nothing is left under the role
SELECT * FROM distlock.drop_owned('admin_heir');
SELECT (SELECT count(*) FROM distlock.sessions WHERE created_by = 'admin_heir'::regrole)
	 + (SELECT count(*) FROM distlock.locks WHERE created_by = 'admin_heir'::regrole)
	 + (SELECT count(*) FROM distlock.jobs WHERE created_by = 'admin_heir'::regrole)
	 + (SELECT count(*) FROM distlock.throttles WHERE owner = 'admin_heir'::regrole) AS left_to_heir;
SELECT attempt(format('distlock.complete(%s, %L)', :j1, :'s'))
	   = format('42704: job %s does not exist', :j1) AS job_gone;
SELECT distlock.try_acquire('app-lock', 'someone', '1 minute') IS NOT NULL AS lock_free_again;
DELETE FROM distlock.locks WHERE name = 'app-lock';

-- a role dropped with rows left behind: an administrator names it by OID
SET ROLE admin_other;
SELECT distlock.try_acquire('orphan-lock', 'o', '1 hour') IS NOT NULL AS taken;
RESET ROLE;
SELECT 'admin_other'::regrole::oid AS other_oid \gset
REVOKE USAGE ON SCHEMA distlock FROM admin_other;
DROP ROLE admin_other;
SELECT locks FROM distlock.drop_owned(:other_oid::oid::regrole);
SELECT count(*) AS orphans FROM distlock.locks WHERE created_by = :other_oid::oid;

-- role_ref, what a restore reads the rows' roles as: a role's name is
-- that role; a name no role has, or a number (an OID in the dump names
-- another role here, or none: 10 is always the bootstrap superuser), is no
-- role, with a WARNING; no role, and a role that is gone, read back as '-'
SELECT 'admin_app'::distlock.role_ref::oid = 'admin_app'::regrole::oid AS named,
	   '"admin_app"'::distlock.role_ref::text AS quoted;
SELECT 'no_such_role'::distlock.role_ref::oid AS missing;
SELECT '10'::distlock.role_ref::oid AS number;
SELECT '-'::distlock.role_ref::oid AS no_role,
	   (:other_oid::oid)::distlock.role_ref::text AS gone;

REVOKE USAGE ON SCHEMA distlock FROM admin_app, admin_heir;
DROP ROLE admin_app, admin_heir;
