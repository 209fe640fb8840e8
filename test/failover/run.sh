#!/bin/bash
# test/failover/run.sh -- the fault suite's workload and checker through a
# failover: kill the primary, promote its standby, and see what the clients
# were told and what the new primary has.
#
#	test/failover/run.sh [SCENARIO...]	gate mode: sync waiting
#	FULL=1 test/failover/run.sh		and async paf-kill paf-switchover
#						(.ci/run sets FULL=1)
#	SOAK=1 test/failover/run.sh		soak mode: longer, more clients
#	SEED=N test/failover/run.sh		rerun with the seed a run printed
#	TOPOLOGY=script test/failover/run.sh	another HA setup (default
#						test/failover/streaming.sh)
#	SET='{"duration": 30}' test/failover/run.sh	override scenario parameters
#
# sync: synchronous replication; every invariant of test/fault/checker.py
# must hold across the failover, and dead sessions' jobs come back in time.
# async: the standby's walreceiver is stopped for a while before the kill,
# so acknowledged grants and completions are lost; the tokens granted after
# the promotion must still be larger than every token handed out before.
# waiting: sync, with a CALL distlock.acquire() and a CALL
# distlock.claim_wait() waiting at the kill.  paf-kill and paf-switchover:
# sync on pg_auto_failover (autofailover.sh: a monitor and two nodes), the
# primary's node killed and the monitor failing over, or pg_autoctl perform
# failover; skipped (a "#" line) when pg_auto_failover is not installed for
# the server under test.  Each scenario gets a topology of its own; prints
# "ok - ..." / "not ok - ..." lines; every server is stopped by PID on
# exit.
set -uo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/test/cluster.sh"
. "$top/test/fault/harness.sh"
here="$top/test/failover"
TOPOLOGY=${TOPOLOGY:-$here/streaming.sh}
paf="$here/autofailover.sh"
topology=$TOPOLOGY
scenarios=("$@")
if [ ${#scenarios[@]} -eq 0 ]; then
	scenarios=(sync waiting)
	# asynchronous replication's and pg_auto_failover's: in CI (FULL=1)
	# and the soak; make test leaves them out to stay within ten minutes
	if [ "${FULL:-0}" != 0 ] || [ "$SOAK" != 0 ]; then
		scenarios+=(async paf-kill paf-switchover)
	else
		echo "# async, paf-kill and paf-switchover left out: FULL=1 runs them (.ci/run does)"
	fi
fi
work=$(harness_workdir failover)
current=

# Stop what a scenario started: its clients (by the PIDs the harness
# recorded, if they are still ours) and its servers.
stop_all()
{
	local d=$1
	[ -n "$d" ] || return 0
	kill_clients "$d/history/pids"
	bash "$topology" stop "$d/topology"
}
trap 'stop_all "$current"' EXIT

echo "# failover, $mode mode, seed $SEED, topology $(basename "$TOPOLOGY")" \
	"(rerun: SEED=$SEED$([ "$mode" = soak ] && echo " SOAK=1") test/failover/run.sh)"
echo "# logs and histories: $work"

for s in "${scenarios[@]}"; do
	# the scenario of failover.py, the topology, and how it fails over
	topology=$TOPOLOGY
	scenario=$s
	export PAF_FAILOVER=
	case $s in
		sync) i=1 repl=sync ;; async) i=2 repl=async ;; waiting) i=3 repl=sync ;;
		paf-kill) i=4 repl=sync scenario=paf topology=$paf PAF_FAILOVER=kill ;;
		paf-switchover) i=5 repl=sync scenario=paf topology=$paf PAF_FAILOVER=perform ;;
		*) echo "not ok - unknown scenario $s"; continue ;;
	esac
	d="$work/$s"
	mkdir -p "$d"
	chmod 755 "$d"
	current=$d
	seed=$((SEED * 10 + i))
	echo "== $s (seed $seed)"
	t0=$SECONDS
	bash "$topology" start "$d/topology" "$repl" "max_connections = 100" \
		"log_min_messages = warning" >"$d/topology.log" 2>&1
	rc=$?
	if [ $rc -eq 77 ]; then
		echo "# $s skipped: $(tail -1 "$d/topology.log")"
		stop_all "$d"
		current=
		continue
	elif [ $rc -ne 0 ]; then
		cat "$d/topology.log"
		echo "not ok - $s: the topology did not start"
		stop_all "$d"
		current=
		continue
	fi
	if $py "$here/failover.py" run --scenario "$scenario" --dir "$d/history" \
		--topology "$topology" --topo-dir "$d/topology" --seed "$seed" \
		${SET:+--set "$SET"} "${soak_flag[@]}" >"$d/workload.log" 2>&1; then
		$py "$top/test/fault/checker.py" "$d/history" ||
			echo "not ok - $s: checker exited with status $?"
	else
		tail -30 "$d/workload.log"
		echo "not ok - $s: workload failed (seed $seed)"
	fi
	echo "# $s took $((SECONDS - t0)) s"
	stop_all "$d"
	# the data directories go, the logs stay
	rm -rf "$d/topology/primary/data" "$d/topology/standby/data" \
		"$d/topology/node1" "$d/topology/node2" "$d/topology/monitor"
	current=
done
echo "# failover test took $SECONDS s"
