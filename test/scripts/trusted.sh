#!/bin/bash
# test/scripts/trusted.sh -- a database owner who is not a superuser can
# install distlock (it is trusted), hand it on to an application role, and
# administer that role's objects; the application role cannot touch the
# owner's.  Whoever installed or updated it, the database's owner, even
# after ALTER DATABASE ... OWNER TO, may back it up (pg_dump).
set -euo pipefail
. "$(dirname "$0")/common.sh"
test_cluster_start trusted

psql -c "CREATE ROLE dbo LOGIN" -c "CREATE ROLE app LOGIN" -c "CREATE DATABASE appdb OWNER dbo"
as_dbo() { psql -At -U dbo -d appdb "$@"; }
as_app() { psql -At -U app -d appdb "$@"; }

as_dbo -c "CREATE EXTENSION distlock"
check "a non-superuser database owner installs distlock" \
	"$(as_dbo -c "SELECT extowner::regrole FROM pg_extension WHERE extname = 'distlock'")" dbo
check "its tables belong to the bootstrap superuser, not to the owner" \
	"$(as_dbo -c "SELECT relowner::regrole FROM pg_class WHERE oid = 'distlock.jobs'::regclass")" postgres
check "the owner cannot change or remove rows directly (it may only read and add them, to back up and restore)" \
	"$(as_dbo -c "SELECT has_table_privilege('distlock.locks', 'UPDATE'), has_table_privilege('distlock.locks', 'DELETE'),
		has_table_privilege('distlock.locks', 'SELECT'), has_table_privilege('distlock.locks', 'INSERT')")" "f|f|t|t"

# Every privilege a role holds by name on distlock's schema and relations
# ("*": with grant option): a TRIGGER, TRUNCATE or UPDATE on a table, or
# CREATE on the schema, would let a non-superuser run code or change rows
# behind the calls, which run as the schema's owner.
privileges_of() {
	as_dbo -c "SELECT string_agg(what || ':' || privs, ' ' ORDER BY what) FROM (
		SELECT o.what, string_agg(a.privilege_type ||
				CASE WHEN a.is_grantable THEN '*' ELSE '' END, ','
				ORDER BY a.privilege_type) AS privs
		FROM (SELECT 'schema' AS what, nspacl AS acl FROM pg_namespace
			  WHERE nspname = 'distlock'
			  UNION ALL
			  SELECT relname::text, relacl FROM pg_class
			  WHERE relnamespace = 'distlock'::regnamespace) o,
			 aclexplode(o.acl) a
		WHERE a.grantee = '$1'::regrole GROUP BY o.what) p"
}
owner_privileges="jobs:INSERT,SELECT jobs_id_seq:SELECT,UPDATE limits:INSERT,SELECT locks:INSERT,SELECT queue_grants:INSERT,SELECT schema:USAGE* sessions:INSERT,SELECT throttles:INSERT,SELECT token_epoch:INSERT,SELECT token_seq:SELECT,UPDATE"
check "the owner holds exactly: USAGE on the schema, to grant on; SELECT and INSERT on the tables, SELECT and UPDATE on the sequences, to back up and restore" \
	"$(privileges_of dbo)" "$owner_privileges"
check "... and so does the database's owner, whoever it is (pg_database_owner), but the right to grant USAGE" \
	"$(privileges_of pg_database_owner)" "${owner_privileges/schema:USAGE\*/schema:USAGE}"

# What the database's owner may do, by name or through pg_database_owner.
owner_can() {
	psql -At -d appdb -c "SELECT has_schema_privilege('$1', 'distlock', 'USAGE'),
		has_table_privilege('$1', 'distlock.jobs', 'SELECT'),
		has_table_privilege('$1', 'distlock.throttles', 'INSERT'),
		has_sequence_privilege('$1', 'distlock.token_seq', 'UPDATE'),
		has_table_privilege('$1', 'distlock.jobs', 'UPDATE')"
}
dumps() {
	as_owner "$PG_BINDIR/pg_dump" -h "$PGHOST" -p "$PGPORT" -U "$1" -f /dev/null appdb 2>&1 &&
		echo dumped
}

as_dbo -c "GRANT USAGE ON SCHEMA distlock TO app"
sid=$(as_app -c "SELECT distlock.session_open('1 hour', 'app')")
check "the application role uses the API" \
	"$(as_app -c "SELECT distlock.try_acquire('app-lock', 'app', '1 hour', '$sid') IS NOT NULL,
				   distlock.enqueue('q', '{}') > 0")" "t|t"
check "the extension owner administers the application role's lock" \
	"$(as_dbo -c "SELECT distlock.renew('app-lock', 'app', '2 hours')")" t
check "... and claims the jobs of its queue" \
	"$(as_dbo -c "SELECT count(*) FROM distlock.claim('q', distlock.session_open(), owner => 'app')")" 1
as_dbo -c "SELECT distlock.try_acquire('dbo-lock', 'dbo', '1 hour')" >/dev/null
check "the application role cannot release the owner's lock (to it, another owner's)" \
	"$(as_app -c "SELECT distlock.release('dbo-lock', 'dbo'), distlock.renew('dbo-lock', 'dbo')")" "f|f"
check "... which the owner still holds" \
	"$(as_dbo -c "SELECT owner FROM distlock.active_locks WHERE name = 'dbo-lock'")" dbo
check "the application role sees only its own rows" \
	"$(as_app -c "SELECT string_agg(name, ',') FROM distlock.active_locks")" app-lock
# any role with CREATE on the database may install it; the database's
# owner still administers it
psql -c "CREATE ROLE installer LOGIN" -c "GRANT CREATE ON DATABASE appdb TO installer"
as_dbo -c "DROP EXTENSION distlock"
psql -At -U installer -d appdb -c "CREATE EXTENSION distlock" -c "GRANT USAGE ON SCHEMA distlock TO app" >/dev/null
check "a role with CREATE on the database installs it and owns it" \
	"$(as_dbo -c "SELECT extowner::regrole FROM pg_extension WHERE extname = 'distlock'")" installer
check "... holds what an owner holds" "$(privileges_of installer)" "$owner_privileges"
check "... and the database's owner, USAGE on the schema to grant on and what a backup needs" \
	"$(owner_can dbo)" "t|t|t|t|f"
check "... and it backs it up" "$(dumps dbo)" dumped
as_app -c "SELECT distlock.try_acquire('app-lock', 'app', '1 hour')" >/dev/null
check "the database's owner may call it, and administers the application role's lock" \
	"$(as_dbo -c "SELECT distlock.renew('app-lock', 'app', '2 hours'), distlock.release('app-lock', 'app')")" "t|t"
check "... while the application role still sees only its own rows, and none of the owners'" \
	"$(as_dbo -c "SELECT distlock.try_acquire('dbo-lock', 'dbo', '1 hour') IS NOT NULL" &&
	   as_app -c "SELECT count(*) FROM distlock.active_locks WHERE name = 'dbo-lock'")" $'t\n0'
psql -At -U installer -d appdb -c "DROP EXTENSION distlock" >/dev/null
check "the installer drops it again" \
	"$(as_dbo -c "SELECT count(*) FROM pg_namespace WHERE nspname = 'distlock'")" 0
psql -c "REVOKE CREATE ON DATABASE appdb FROM installer" -c "DROP ROLE installer"
as_dbo -c "CREATE EXTENSION distlock"
as_dbo -c "DROP EXTENSION distlock"
check "the owner drops it again" \
	"$(as_dbo -c "SELECT count(*) FROM pg_namespace WHERE nspname = 'distlock'")" 0

# A superuser who updates the owner's install runs the update script as
# itself: the owner must still be able to back it up.  So must a new owner
# of the database, and the old one no longer (it did not install it).
as_dbo -c "CREATE EXTENSION distlock VERSION '1.0'"
psql -d appdb -c "ALTER EXTENSION distlock UPDATE"
check "updated by a superuser, the owner's install is backed up by the owner" \
	"$(owner_can dbo) $(dumps dbo)" "t|t|t|t|f dumped"
as_dbo -c "DROP EXTENSION distlock"
psql -d appdb -c "CREATE EXTENSION distlock"
# the owner hands a superuser's install on, and restores its own dump of
# it, the grant it made included (made by name, it restores without SET
# SESSION AUTHORIZATION to a role the owner cannot become)
as_dbo -c "GRANT USAGE ON SCHEMA distlock TO app"
psql -c "CREATE DATABASE appcopy OWNER dbo"
as_owner "$PG_BINDIR/pg_dump" -h "$PGHOST" -p "$PGPORT" -U dbo -Fc -f "$dir/app.dump" appdb
check "the owner restores its dump of a superuser's install, with the grants it made" \
	"$(as_owner "$PG_BINDIR/pg_restore" -h "$PGHOST" -p "$PGPORT" -U dbo -d appcopy \
		--single-transaction "$dir/app.dump" 2>&1;
	   psql -At -d appcopy -c "SELECT has_schema_privilege('app', 'distlock', 'USAGE')")" t
psql -c "DROP DATABASE appcopy"
psql -c "CREATE ROLE dbo2 LOGIN" -c "ALTER DATABASE appdb OWNER TO dbo2"
check "a superuser's install is backed up by the database's new owner" \
	"$(owner_can dbo2) $(dumps dbo2)" "t|t|t|t|f dumped"
check "... and no longer by the old one, which keeps only the USAGE granted to it by name" \
	"$(owner_can dbo)" "t|f|f|f|f"
psql -c "ALTER DATABASE appdb OWNER TO dbo" -c "DROP ROLE dbo2"
psql -d appdb -c "DROP EXTENSION distlock"

# The install grants the database's owner the right to grant USAGE on the
# schema by name: a
# name that needs quoting must reach GRANT quoted once.
psql -c 'CREATE ROLE "App Owner" LOGIN' -c 'CREATE DATABASE quoted OWNER "App Owner"' >/dev/null
check "a database owner whose name needs quoting installs it" \
	"$(psql -At -U "App Owner" -d quoted -c "CREATE EXTENSION distlock" -c "SELECT 'installed'" 2>&1)" installed
check "... and may grant USAGE on the schema" \
	"$(psql -At -U "App Owner" -d quoted -c "SELECT has_schema_privilege('App Owner', 'distlock', 'USAGE WITH GRANT OPTION')")" t
