#!/bin/bash
# test/fault/run.sh -- the fault-injection suite: mutual exclusion and
# exactly-once acknowledgement under kills, pauses and crashes.
#
#	test/fault/run.sh [SCENARIO...]		gate mode (make test)
#	FULL=1 test/fault/run.sh			gate mode with d2-del, d2-sql,
#										pool-sql and d2-del-sql (.ci/run
#										sets FULL=1)
#	SOAK=1 test/fault/run.sh			soak mode: same harness, bigger numbers
#	SEED=N test/fault/run.sh			rerun with the seed a run printed
#
# First the history checker's self-test (planted violations must each be
# flagged, a clean history must pass), then each scenario on a throwaway
# cluster of its own: D1 locks, D2 queue, D4 crash cycles, and the pool hop
# through PgBouncer in transaction pooling mode (with the advisory-lock
# comparison), with distlock.direct_path on, the default, and distlock
# preloaded (its claim positions and wake-ups in shared memory, which a
# crash resets); then the queue scenarios once more, smaller, with
# distlock.direct_path = off in postgresql.conf and nothing preloaded
# (d2-sql, pool-sql): the queue's two implementations each face the
# faults; and the queue once more, smaller, with
# distlock.delete_completed = on, where every acknowledgement deletes its
# job, on both paths (d2-del, d2-del-sql).  make test runs the first four;
# FULL=1 all of them.  workload.py runs the clients and injects the faults,
# checker.py judges the recorded history and which path the calls took.
# The clusters keep the history without touching distlock's tables: a
# logical replication slot (wal_level = logical, test_decoding) and commit
# timestamps record every change of their rows, and pg_stat_statements
# (track = all) counts the statements distlock runs inside its functions.
# Prints "ok - ..." / "not ok - ..." lines; every process started here is
# stopped by PID on exit.
set -uo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/test/cluster.sh"
. "$top/test/fault/harness.sh"
fault="$top/test/fault"
scenarios=("$@")
if [ ${#scenarios[@]} -eq 0 ]; then
	scenarios=(d1 d2 d4 pool)
	# The SQL path's runs and distlock.delete_completed's: in CI (FULL=1)
	# and the soak.  make test keeps to the production path with the
	# default settings, to stay within ten minutes; the regression and
	# isolation suites run both paths and both settings there.
	if [ "${FULL:-0}" != 0 ] || [ "$SOAK" != 0 ]; then
		scenarios+=(d2-del d2-sql pool-sql d2-del-sql)
	else
		echo "# d2-del, d2-sql, pool-sql and d2-del-sql left out: FULL=1 runs them (.ci/run does)"
	fi
fi
work=$(harness_workdir fault)
PGB_PID=

# Stop what a scenario started: its clients (by the PIDs workload.py
# recorded), PgBouncer, the cluster.
stop_all()
{
	local d=$1
	kill_clients "$d/pids"
	if [ -n "$PGB_PID" ]; then
		kill -TERM "$PGB_PID" 2>/dev/null
		for _ in $(seq 1 50); do
			kill -0 "$PGB_PID" 2>/dev/null || break
			sleep 0.1
		done
		PGB_PID=
	fi
	if [ -n "${CLUSTER_DIR:-}" ]; then
		cluster_pid_refresh
		cluster_stop
	fi
}
current=
trap 'stop_all "$current"' EXIT

rerun="SEED=$SEED"
[ "$mode" = soak ] && rerun="$rerun SOAK=1"
echo "# fault injection, $mode mode, seed $SEED (rerun: $rerun test/fault/run.sh)"
echo "# logs and histories: $work"

# The checker's self-test comes first: its verdicts on real runs are only
# worth something if it flags every planted violation.
$py "$fault/checker.py" --selftest "$fault/histories" ||
	echo "not ok - checker self-test exited with status $?"

for s in "${scenarios[@]}"; do
	# a scenario's seed depends on its name, not on which ones run
	case $s in
		d1) i=1 ;; d2) i=2 ;; d4) i=3 ;; pool) i=4 ;;
		d2-sql) i=5 ;; pool-sql) i=6 ;; d2-del) i=7 ;; d2-del-sql) i=8 ;; *) i=0 ;;
	esac
	# NAME-sql: scenario NAME on the queue's SQL path; NAME-del: with
	# acknowledgements that delete; NAME-del-sql: both
	scenario=${s%-sql}
	deleting=no
	[ "${scenario%-del}" != "$scenario" ] && deleting=yes
	scenario=${scenario%-del}
	# the direct path with its claim positions and wake-ups in shared
	# memory (distlock preloaded, its background worker stopped)
	path=direct
	preload="pg_stat_statements, distlock"
	conf=("distlock.maintenance_naptime = 0")
	keep=()
	if [ "${s%-sql}" != "$s" ]; then
		path=sql
		preload="pg_stat_statements"
		conf=("distlock.direct_path = off")
	fi
	if [ $deleting = yes ]; then
		conf+=("distlock.delete_completed = on")
		keep=(--delete-completed)
	fi
	d="$work/$s"
	mkdir -p "$d"
	chmod 755 "$d"
	current=$d
	seed=$((SEED * 10 + i))
	echo "== $s (seed $seed)"
	if ! cluster_start "$d/cluster" "track_commit_timestamp = on" \
		"restart_after_crash = on" "max_connections = 200" \
		"log_min_messages = warning" \
		"wal_level = logical" "max_replication_slots = 4" \
		"shared_preload_libraries = '$preload'" \
		"pg_stat_statements.track = all" "${conf[@]}"; then
		echo "not ok - $s: cluster did not start"
		continue
	fi
	pool=()
	if [ "$scenario" = pool ]; then
		if ! pgbouncer_start "$d/pgbouncer" fault; then
			echo "not ok - $s: pgbouncer did not start"
			stop_all "$d"
			continue
		fi
		pool=(--pool-port "$PGB_PORT")
	fi
	t0=$SECONDS
	if $py "$fault/workload.py" run --scenario "$scenario" --path "$path" \
		--dir "$d/history" \
		--port "$PGPORT" --cluster-dir "$d/cluster" --seed "$seed" \
		"${pool[@]}" "${soak_flag[@]}" "${keep[@]}" >"$d/workload.log" 2>&1; then
		$py "$fault/checker.py" "$d/history" ||
			echo "not ok - $s: checker exited with status $?"
	else
		tail -30 "$d/workload.log"
		echo "not ok - $s: workload failed (seed $seed)"
	fi
	if [ "$s" = pool ]; then
		if $py "$fault/workload.py" advisory --port "$PGPORT" \
			--pool-port "$PGB_PORT" --seed "$seed" >"$d/advisory.json" 2>"$d/advisory.log"; then
			$py "$fault/checker.py" --advisory "$d/advisory.json"
		else
			tail -20 "$d/advisory.log"
			echo "not ok - advisory locks through pgbouncer: measurement failed"
		fi
	fi
	echo "# $s took $((SECONDS - t0)) s"
	stop_all "$d"
	rm -rf "$d/cluster/data"	# the histories and logs stay
	current=
done
echo "# fault suite took $SECONDS s"
