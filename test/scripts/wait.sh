#!/bin/bash
# test/scripts/wait.sh -- the calls that wait in the server (claim_wait,
# complete_and_claim_wait, acquire), on a server where distlock is
# preloaded (waiters are woken by the committing transaction) and on one
# where it is not (they look again every distlock.wait_poll_interval, or,
# from PostgreSQL 17 on, are woken through the DSM registry);
# the cases are in wait.py.  Then a waiting claim through PgBouncer in
# transaction pooling mode.
set -euo pipefail
. "$(dirname "$0")/common.sh"

py=/usr/bin/python3		# Debian's, which has psycopg

# stop_with_waiter LABEL: a fast shutdown while a claim waits ends the
# wait at once (57P01) and does not wait for it.
stop_with_waiter()
{
	local sid start rc
	sid=$(psql -At -c "SELECT distlock.session_open('1 hour')")
	psql -c "CALL distlock.claim_wait('stop', '$sid', 1, '60 s')" \
		>"$dir/stop.out" 2>&1 &
	local waiter=$!
	sleep 1
	start=$SECONDS
	kill -INT "$CLUSTER_PID"	# fast shutdown (TERM would wait for clients)
	rc=0
	wait $waiter || rc=$?
	cluster_stop
	check "[$1] a fast shutdown ends a waiting call at once, and is not held up" \
		"$rc/$(grep -c 'terminating connection due to administrator command' "$dir/stop.out")/$((SECONDS - start < 10))" "2/1/1"
}

test_cluster_start wait-preload "shared_preload_libraries = 'distlock'"
$py "$top/test/scripts/wait.py" preload || true
stop_with_waiter preload
rm -rf "$dir"

test_cluster_start wait-poll
# from 17 on, waiters are woken without preloading too (the DSM registry);
# before, they poll: every case in CI (FULL=1), the first few in make test,
# to stay within ten minutes
if [ "$(psql -At -c "SHOW server_version_num")" -ge 170000 ]; then
	$py "$top/test/scripts/wait.py" dsm || true
elif [ "${FULL:-0}" != 0 ]; then
	$py "$top/test/scripts/wait.py" poll || true
else
	echo "# the waiting calls without preloading (polling): the first cases; FULL=1 runs them all (.ci/run does)"
	$py "$top/test/scripts/wait.py" poll --basic || true
fi

# Through PgBouncer in transaction mode: the CALL is one transaction to
# the pooler, and its server connection is the waiter's until it returns.
createdb pooled
psql -d pooled -c "CREATE EXTENSION distlock"
stop_pgbouncer()
{
	kill "$PGB_PID" 2>/dev/null || true
}
test_on_exit=stop_pgbouncer
pgbouncer_start "$dir/pgbouncer" pooled
sid=$(psql -d pooled -At -c "SELECT distlock.session_open()")
start=$SECONDS
( sleep 0.5; psql -d pooled -c "SELECT distlock.enqueue('pooled')" >/dev/null ) &
got=$(psql -h 127.0.0.1 -p "$PGB_PORT" -d pooled -At \
	-c "CALL distlock.claim_wait('pooled', '$sid', 1, '30 s')")
wait
elapsed=$((SECONDS - start < 10))
check "a waiting claim through PgBouncer in transaction mode gets its job" \
	"$(echo "$got" | grep -c '"queue": "pooled"')/$elapsed" "1/1"
stop_pgbouncer
stop_with_waiter no-preload
