#!/bin/bash
# test/scripts/maintenance.sh -- the background workers and maintain().
#
# On a server with distlock preloaded: the launcher and a worker per
# database with distlock are in pg_stat_activity; an expired session is
# reaped within about a second (distlock.maintenance_naptime) without any
# call, and its job handed back; finished jobs past distlock.job_retention
# are deleted and nothing else is, and a database's own retention (ALTER
# DATABASE ... SET) reaches its worker, which starts again; DROP DATABASE, CREATE DATABASE ...
# TEMPLATE and ALTER DATABASE ... RENAME work while a worker is connected;
# distlock.maintenance_databases narrows what is served; a worker killed
# (a crash, and the server's restart) comes back.  Then maintain() on a
# server without preloading: an ordinary role is refused (42501); called
# by the database's owner, free lock rows past distlock.lock_retention go,
# held and on-hold ones stay, and a pruned lock changes nothing a caller
# sees.
set -euo pipefail
. "$(dirname "$0")/common.sh"

# wait_for SQL WANT [SECONDS]: poll until SQL returns WANT; prints the
# seconds it took, or "timeout".
wait_for()
{
	local start=$SECONDS got
	while [ $((SECONDS - start)) -lt "${3:-20}" ]; do
		got=$(psql -At -c "$1" 2>/dev/null || true)
		if [ "$got" = "$2" ]; then
			echo "ok"
			return
		fi
		sleep 0.1
	done
	echo "timeout (last: $got)"
}

workers="SELECT string_agg(coalesce(datname, '-') || ':' || backend_type, ',' ORDER BY datname NULLS FIRST, backend_type)
	FROM pg_stat_activity WHERE backend_type LIKE 'distlock%'"

test_cluster_start maintenance "shared_preload_libraries = 'distlock'"
createdb with_distlock
createdb without_distlock
psql -d with_distlock -c "CREATE EXTENSION distlock"
psql -c "CREATE EXTENSION distlock"
check "a launcher, and a worker in each database with distlock" \
	"$(wait_for "$workers" "-:distlock launcher,postgres:distlock maintenance,with_distlock:distlock maintenance")" ok
check "... that hold no snapshot while they sleep" \
	"$(psql -At -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'distlock%' AND backend_xmin IS NOT NULL AND state <> 'active'")" 0

# reaping without a caller
sid=$(psql -At -c "SELECT distlock.session_open('1 s')")
job=$(psql -At -c "SELECT distlock.enqueue('q')")
psql -At -c "SELECT id FROM distlock.claim('q', '$sid')" >/dev/null
expires=$(psql -At -c "SELECT extract(epoch FROM expires_at) FROM distlock.sessions WHERE id = '$sid'")
check "an expired session is reaped by the worker, its job handed back" \
	"$(wait_for "SELECT status FROM distlock.jobs WHERE id = $job" pending 15)" ok
late=$(psql -At -c "SELECT round((extract(epoch FROM clock_timestamp()) - $expires)::numeric, 2)")
echo "# reaped $late s after the session expired (naptime 1 s)"
check "... within about a second of its expiry" \
	"$(psql -At -c "SELECT $late < 3")" t
check "... and the session is gone" \
	"$(psql -At -c "SELECT count(*) FROM distlock.sessions WHERE id = '$sid'")" 0

# retention of finished jobs
sid=$(psql -At -c "SELECT distlock.session_open('1 hour')")
psql -At -c "SELECT distlock.enqueue('r', jsonb_build_object('n', n)) FROM generate_series(1, 5) n" >/dev/null
psql -At -c "SELECT count(*) FROM distlock.claim('r', '$sid', 3)" >/dev/null
psql -c "SELECT distlock.complete(id, '$sid', '{\"kept\": false}') FROM distlock.jobs WHERE queue = 'r' AND status = 'running' ORDER BY id LIMIT 1" >/dev/null
psql -c "SELECT distlock.cancel(id) FROM distlock.jobs WHERE queue = 'r' AND status = 'pending' ORDER BY id LIMIT 1" >/dev/null
psql -c "ALTER SYSTEM SET distlock.job_retention = '1s'" -c "SELECT pg_reload_conf()" >/dev/null
check "finished jobs past distlock.job_retention are deleted" \
	"$(wait_for "SELECT string_agg(status::text, ',' ORDER BY status) FROM distlock.jobs WHERE queue = 'r'" "pending,running,running" 15)" ok
# A database's own setting reaches its worker (the server applies it only
# when a connection starts): the worker starts again, keeps what the
# database keeps, and goes back to the server's setting once it is reset.
worker_pid="SELECT pid FROM pg_stat_activity WHERE datname = 'postgres' AND backend_type = 'distlock maintenance'"
pid=$(psql -At -c "$worker_pid")
psql -c "ALTER DATABASE postgres SET distlock.job_retention = '1h'" >/dev/null
check "a worker whose database's settings change starts again" \
	"$(wait_for "SELECT count(*) FROM ($worker_pid) w WHERE pid <> $pid" 1 15)" ok
psql -c "SELECT distlock.complete(id, '$sid', '{\"kept\": true}') FROM distlock.jobs WHERE queue = 'r' AND status = 'running' ORDER BY id LIMIT 1" >/dev/null
sleep 3
check "... and keeps finished jobs for the database's distlock.job_retention, not the server's" \
	"$(psql -At -c "SELECT string_agg(status::text, ',' ORDER BY status) FROM distlock.jobs WHERE queue = 'r'")" "pending,running,completed"
psql -c "ALTER DATABASE postgres RESET distlock.job_retention" >/dev/null
check "... until it is reset" \
	"$(wait_for "SELECT string_agg(status::text, ',' ORDER BY status) FROM distlock.jobs WHERE queue = 'r'" "pending,running" 15)" ok
psql -c "ALTER SYSTEM RESET distlock.job_retention" -c "SELECT pg_reload_conf()" >/dev/null

# commands that need a database to themselves
check "DROP DATABASE while the worker is connected" \
	"$(psql -c "DROP DATABASE with_distlock" 2>&1 || true)" ""
createdb tpl
psql -d tpl -c "CREATE EXTENSION distlock"
wait_for "SELECT count(*) FROM pg_stat_activity WHERE datname = 'tpl' AND backend_type = 'distlock maintenance'" 1 >/dev/null
check "CREATE DATABASE ... TEMPLATE a database the worker serves" \
	"$(psql -c "CREATE DATABASE copy TEMPLATE tpl" 2>&1 || true)" ""
check "ALTER DATABASE ... RENAME of a database the worker serves" \
	"$(psql -c "ALTER DATABASE tpl RENAME TO tpl2" 2>&1 || true)" ""
check "... and the copy, and the renamed one, are served" \
	"$(wait_for "SELECT string_agg(datname, ',' ORDER BY datname) FROM pg_stat_activity WHERE backend_type = 'distlock maintenance' AND datname IN ('copy', 'tpl2')" "copy,tpl2" 30)" ok

# only whoever may run such a command makes the worker step aside
psql -c "CREATE ROLE intruder LOGIN" >/dev/null
pid=$(psql -At -c "SELECT pid FROM pg_stat_activity WHERE datname = 'copy' AND backend_type = 'distlock maintenance'")
psql -U intruder -d postgres -c "DROP DATABASE copy" >/dev/null 2>&1 || true
sleep 0.5
check "a DROP DATABASE its role may not run leaves the worker alone" \
	"$(psql -At -c "SELECT count(*) FROM pg_stat_activity WHERE pid = $pid")" 1

# a launcher that restarts adopts the workers it finds
launcher=$(psql -At -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'distlock launcher'")
psql -c "SELECT pg_terminate_backend($launcher)" >/dev/null
check "a restarted launcher ..." \
	"$(wait_for "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'distlock launcher' AND pid <> $launcher" 1 30)" ok
sleep 2
check "... adopts the workers running, starting no second one" \
	"$(psql -At -c "SELECT count(*) || '/' || bool_and(pid = $pid) FROM pg_stat_activity WHERE datname = 'copy' AND backend_type = 'distlock maintenance'")" "1/true"
check "workers end only when told to: no other FATAL or ERROR in the server log" \
	"$(grep -E 'FATAL|ERROR' "$dir/server.log" | grep -v 'must be owner of database' | grep -vc 'due to administrator command' || true)" 0
grep -E 'FATAL|ERROR' "$dir/server.log" | sed 's/^/# /'

# narrowing
psql -c "ALTER SYSTEM SET distlock.maintenance_databases = 'postgres'" -c "SELECT pg_reload_conf()" >/dev/null
check "distlock.maintenance_databases narrows the databases served" \
	"$(wait_for "$workers" "-:distlock launcher,postgres:distlock maintenance")" ok
psql -c "ALTER SYSTEM SET distlock.maintenance_naptime = 0" -c "SELECT pg_reload_conf()" >/dev/null
check "distlock.maintenance_naptime = 0 stops the workers" \
	"$(wait_for "$workers" "-:distlock launcher")" ok
psql -c "ALTER SYSTEM RESET distlock.maintenance_naptime" -c "SELECT pg_reload_conf()" >/dev/null
check "... and back" \
	"$(wait_for "$workers" "-:distlock launcher,postgres:distlock maintenance")" ok

# a crash: the server restarts, and so do the workers
pid=$(psql -At -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'distlock maintenance'")
kill -9 "$pid"
sleep 1
check "a killed worker (a crash) comes back after the restart" \
	"$(wait_for "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'distlock maintenance' AND pid <> $pid" 1 30)" ok
sid=$(psql -At -c "SELECT distlock.session_open('1 s')")
job=$(psql -At -c "SELECT distlock.enqueue('after')")
psql -At -c "SELECT id FROM distlock.claim('after', '$sid')" >/dev/null
check "... and reaps again" \
	"$(wait_for "SELECT status FROM distlock.jobs WHERE id = $job" pending 15)" ok
cluster_stop
rm -rf "$dir"

# maintain() without preloading: refused to an ordinary role, run by the
# database's owner (not a superuser)
test_cluster_start maintain
psql -c "CREATE EXTENSION distlock" -c "CREATE ROLE app LOGIN" -c "CREATE ROLE ops LOGIN" \
	-c "GRANT USAGE ON SCHEMA distlock TO app, ops" -c "ALTER DATABASE postgres OWNER TO ops" \
	-c "ALTER SYSTEM SET distlock.lock_retention = '1s'" -c "SELECT pg_reload_conf()" >/dev/null
check "no background workers without preloading" \
	"$(psql -At -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'distlock%'")" 0
as_app()
{
	psql -U app -At "$@"
}
released=$(as_app -c "SELECT distlock.try_acquire('released', 'a')")
as_app -c "SELECT distlock.release('released', 'a')" >/dev/null
as_app -c "SELECT distlock.try_acquire('expired', 'a', '1 s')" >/dev/null
as_app -c "SELECT distlock.try_acquire('held', 'a', '1 hour')" >/dev/null
as_app -c "SELECT distlock.try_acquire('on hold', 'a', '1 s', min_hold => '1 hour')" >/dev/null
as_app -c "SELECT distlock.release('on hold', 'a')" >/dev/null
sid=$(as_app -c "SELECT distlock.session_open('1 s')")
as_app -c "SELECT distlock.try_acquire('bound', 'a', '1 hour', '$sid')" >/dev/null
live=$(as_app -c "SELECT distlock.session_open('1 hour')")
as_app -c "SELECT distlock.try_acquire('bound to a live session', 'a', '1 hour', '$live')" >/dev/null
sleep 2.2
check "maintain() by an ordinary role is refused, changing nothing" \
	"$(as_app -c "SELECT distlock.maintain()" 2>&1 | grep -o 'permission denied for function maintain' || true)/$(psql -At -c "SELECT count(*) FROM distlock.locks")" \
	"permission denied for function maintain/6"
check "maintain() by the database's owner reaps, and deletes the free lock rows" \
	"$(psql -U ops -At -c "SELECT reaped || '/' || locks_pruned FROM distlock.maintain()")" "1/3"
check "... and keeps the held and the on-hold ones, and one bound to a live session" \
	"$(psql -At -c "SELECT string_agg(name, ',' ORDER BY name) FROM distlock.locks")" "bound to a live session,held,on hold"
check "... whose holder still holds it" \
	"$(as_app -c "SELECT distlock.renew('bound to a live session', 'a')")" t
check "fence() of a pruned lock refuses with 55000, as for a released one" \
	"$(as_app -c "SELECT distlock.fence('released', $released)" 2>&1 | grep -o 'not held' || true)" "not held"
check "the next grant of a pruned name has a larger token" \
	"$(as_app -c "SELECT distlock.try_acquire('released', 'b') > (SELECT max(token) FROM distlock.active_locks)")" t
