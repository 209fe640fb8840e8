#!/bin/bash
# test/run.sh -- run every distlock test suite against throwaway clusters.
#
#	test/run.sh --regress "a b ..." --isolation "c d ..."
#
# Called by "make test" after the extension is built and installed into the
# server of $PG_CONFIG.  Runs the pg_regress suite and the isolation specs
# twice, with distlock.direct_path on (the default, which users run) and
# off (the SQL statements it stands in for), then each script test listed
# below, and ends with the line "N passed, N failed".  Exits non-zero if
# anything failed.  Servers run as "postgres" when we are root.
set -uo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/test/cluster.sh"

regress=""
isolation=""
while [ $# -gt 0 ]; do
	case $1 in
		--regress) regress=$2; shift 2 ;;
		--isolation) isolation=$2; shift 2 ;;
		*) echo "unknown argument $1" >&2; exit 2 ;;
	esac
done

# Script tests: each prints "ok - ..." or "not ok - ..." lines.
scripts=(
	test/scripts/claim_scale.sh
	test/scripts/claim_held.sh
	test/scripts/plans.sh
	test/scripts/jit.sh
	test/scripts/dump_restore.sh
	test/scripts/upgrade.sh
	test/scripts/trusted.sh
	test/scripts/standby.sh
	test/scripts/readme_snippets.sh
	test/scripts/throttle_bound.sh
	test/scripts/token_crash.sh
	test/scripts/heartbeat_memory.sh
	test/scripts/wait.sh
	test/scripts/maintenance.sh
	test/scripts/prepare.sh
	test/fault/run.sh
	test/failover/run.sh
)
# SCRIPTS="..." runs only those script tests ("" none), for a quicker loop.
if [ -n "${SCRIPTS+x}" ]; then
	read -ra scripts <<<"$SCRIPTS"
fi

pgxs=$("$PG_CONFIG" --pkglibdir)/pgxs
work=$(mktemp -d /tmp/distlock-test.XXXXXX)
# The postgres user cannot always read the checkout (CI may clone under
# /root), so the suites run from a copy.
cp -r "$top/test" "$top/expected" "$work/"
[ "$(id -u)" -eq 0 ] && chown -R postgres: "$work"

passed=0
failed=0

# Count pg_regress's passed and failed tests from file $1: "... ok" and
# "... FAILED" up to PostgreSQL 15, TAP's "ok N" and "not ok N" from 16 on.
count_pg_regress()
{
	local ok bad
	ok=$(grep -cE '\.\.\. ok|^ok [0-9]+ ' "$1")
	bad=$(grep -cE '\.\.\. (FAILED|failed)|^not ok [0-9]+ ' "$1")
	passed=$((passed + ok))
	failed=$((failed + bad))
}

# run_pg_regress NAME DRIVER TESTS PORT [CONFIG_LINE]: runs the suite on a
# temporary instance listening on PORT, CONFIG_LINE in its
# postgresql.conf; the output goes to $work/NAME/summary.log.
run_pg_regress()
{
	local name=$1 driver=$2 tests=$3 port=$4 conf=${5:-} out="$work/$1"
	[ -n "$tests" ] || return 0
	as_owner mkdir -p "$out"
	as_owner ln -s "$work/expected" "$out/expected"
	echo "$conf" | as_owner tee "$out/extra.conf" >/dev/null
	(cd "$out" && as_owner "$driver" \
		--inputdir="$work/test" --outputdir="$out" \
		--temp-instance="$out/tmp_check" --bindir="$PG_BINDIR" \
		--port="$port" --temp-config="$out/extra.conf" \
		--dbname=contrib_regression $tests) >"$out/summary.log" 2>&1
	echo $? >"$out/status"
}

# report_pg_regress NAME TESTS [CONFIG_LINE]: prints the suite's output and
# differences and counts its results.
report_pg_regress()
{
	local name=$1 tests=$2 conf=${3:-} out="$work/$1"
	[ -n "$tests" ] || return 0
	echo "== $name${conf:+ (${conf//$'\n'/, })}"
	cat "$out/summary.log"
	local before=$failed status
	count_pg_regress "$out/summary.log"
	# pg_regress that stops early (a missing expected file, a lost
	# server) exits 2 and leaves the rest of the suite uncounted
	status=$(cat "$out/status" 2>/dev/null || echo 2)
	if [ "$status" -ne 0 ] && [ "$failed" -eq "$before" ]; then
		echo "not ok - $name: pg_regress exited with status $status"
		failed=$((failed + 1))
	fi
	if [ -s "$out/regression.diffs" ]; then
		echo "-- $out/regression.diffs (first 200 lines):"
		head -200 "$out/regression.diffs"
	fi
}

# Both implementations of the queue's hot paths, the direct one first.
# The direct one runs preloaded, as users who want its speed run it: with
# the claim positions (position.c) and the wake-ups in shared memory, the
# background worker stopped so that it changes nothing under the tests.
# The SQL one runs without: so both ways of every call are covered (on 17
# and later the DSM registry gives the shared memory either way).  Each
# way's two suites run on an instance of their own; make test runs the two
# ways side by side, their specs mostly asleep in pg_sleep, to stay within
# ten minutes, and .ci/run (FULL=1) one after the other.
preload="shared_preload_libraries = 'distlock'
distlock.maintenance_naptime = 0"
path_conf()
{
	echo "distlock.direct_path = $1"
	[ "$1" = on ] && echo "$preload"
	return 0
}
ports=()
while [ ${#ports[@]} -lt 2 ]; do
	port=$(free_port)
	[ "${ports[0]:-}" = "$port" ] || ports+=("$port")
done
pids=()
i=0
for path in on off; do
	conf=$(path_conf $path)
	(
		run_pg_regress "regress-direct-$path" \
			"$pgxs/src/test/regress/pg_regress" "$regress" "${ports[$i]}" "$conf"
		run_pg_regress "isolation-direct-$path" \
			"$pgxs/src/test/isolation/pg_isolation_regress" "$isolation" \
			"${ports[$i]}" "$conf"
	) &
	pids+=($!)
	[ "${FULL:-0}" != 0 ] && wait $!
	i=$((i + 1))
done
wait "${pids[@]}"
for path in on off; do
	conf=$(path_conf $path)
	report_pg_regress "regress-direct-$path" "$regress" "$conf"
	report_pg_regress "isolation-direct-$path" "$isolation" "$conf"
done

for s in "${scripts[@]}"; do
	echo "== $s"
	log="$work/$(basename "$s").log"
	start=$SECONDS
	(cd "$work" && WORK="$work" bash "$top/$s") 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	echo "# $s took $((SECONDS - start)) s"
	ok=$(grep -c '^ok - ' "$log")
	bad=$(grep -c '^not ok - ' "$log")
	if [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ]; then
		echo "not ok - $s exited with status $rc"
		bad=1
	fi
	passed=$((passed + ok))
	failed=$((failed + bad))
done

if [ "$failed" -eq 0 ]; then
	rm -rf "$work"
else
	echo "logs: $work"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
