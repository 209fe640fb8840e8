#!/bin/bash
# bench/run.sh -- "make bench": distlock against the SQL it replaces.
#
# Starts a throwaway cluster (fsync on; synchronous_commit on, then a second
# pass with it off), installs PgQ (Debian's postgresql-15-pgq3) if it is
# missing, loads bench/setup.sql and runs bench/bench.py, which prints the
# table and writes bench/results/.  QUICK=1 for a short run; see bench.py
# for the other knobs.  The server is stopped by PID on exit.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/test/cluster.sh"

# PgQ, the installed-extension peer.  Without it (no apt, no network) the
# PgQ rows are left out, and the run says so.
have_pgq=1
if ! dpkg-query -W -f='${Status}' postgresql-15-pgq3 2>/dev/null | grep -q "install ok installed"; then
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	echo "installing postgresql-15-pgq3 (PgQ) for the benchmark"
	if ! { $sudo apt-get install -y -qq --no-install-recommends postgresql-15-pgq3 >/dev/null 2>&1 ||
		{ $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
			$sudo apt-get install -y -qq --no-install-recommends postgresql-15-pgq3 >/dev/null; }; }; then
		echo "warning: could not install postgresql-15-pgq3; PgQ rows are left out" >&2
		have_pgq=0
	fi
fi

dir=$(mktemp -d /tmp/distlock-bench.XXXXXX)
chmod 755 "$dir"

# The previous release's claim (CLAIM_BASE, a commit; "" to skip), built
# from the same checkout, for the rows that compare the claim as it was
# (a heap update that does not wait) with the claim as it is (a row lock
# that skips, then the update).  bench.py installs one library or the
# other for each round; this one is put back on exit.
CLAIM_BASE=${CLAIM_BASE-c93569e}
PG_CONFIG=${PG_CONFIG:-pg_config}
libdir=$("$PG_CONFIG" --pkglibdir)
cp "$libdir/distlock.so" "$dir/distlock-this.so"
restore_library()
{
	cp "$dir/distlock-this.so" "$libdir/.distlock.so.restore" &&
		mv -f "$libdir/.distlock.so.restore" "$libdir/distlock.so"
}
trap 'cluster_stop; restore_library; rm -rf "$dir"' EXIT
if [ -n "$CLAIM_BASE" ] &&
	git -C "$top" cat-file -e "$CLAIM_BASE^{commit}" 2>/dev/null; then
	mkdir "$dir/prev"
	git -C "$top" archive "$CLAIM_BASE" | tar -x -C "$dir/prev"
	if make -C "$dir/prev" PG_CONFIG="$PG_CONFIG" all >"$dir/prev.log" 2>&1; then
		cp "$dir/prev/distlock.so" "$dir/distlock-prev.so"
		export BENCH_LIB_DIR="$libdir" BENCH_LIB_THIS="$dir/distlock-this.so" \
			BENCH_LIB_PREV="$dir/distlock-prev.so"
		echo "previous claim: built from $CLAIM_BASE"
	else
		echo "warning: could not build $CLAIM_BASE; the previous claim's rows are left out" >&2
	fi
else
	echo "previous claim: $CLAIM_BASE is not in this checkout; its rows are left out"
fi
cluster_start "$dir" \
	"fsync = on" \
	"synchronous_commit = on" \
	"shared_buffers = 512MB" \
	"max_wal_size = 16GB" \
	"checkpoint_timeout = 1h" \
	"autovacuum = off" \
	"log_min_messages = warning"
echo "bench cluster: port $PGPORT, pid $CLUSTER_PID, $dir"

psql -X -q -v ON_ERROR_STOP=1 -v pgq=$have_pgq -f "$top/bench/setup.sql" >/dev/null
pgbench -i -q -s 1 -U app postgres >/dev/null 2>&1

BENCH_WORK="$dir" HAVE_PGQ=$have_pgq /usr/bin/python3 "$top/bench/bench.py"

# --- The waiting calls (bench/wake.py) -------------------------------------
# claim_wait() and acquire() against polling loops and graphile-worker: wake-up
# latency, idle cost, throughput and retention, first without distlock in
# shared_preload_libraries (waiters re-check every distlock.wait_poll_interval),
# then, after a restart with it, the waiting calls' rows again (woken by the
# committing transaction).  graphile-worker and a Node for it come from the
# npm registry, cached outside the work tree (bench/graphile/install.sh);
# without them its rows are left out.  WORKLOADS="wake" runs only these.
if [ -z "${WORKLOADS:-}" ] || [[ " $WORKLOADS " == *" wake "* ]]; then
	GRAPHILE_DIR=$("$top/bench/graphile/install.sh") || {
		echo "warning: could not install graphile-worker; its rows are left out" >&2
		GRAPHILE_DIR=
	}
	export GRAPHILE_DIR BENCH_WORK="$dir"
	# this checkout's library, whichever bench.py's last round left in place
	restore_library
	rm -f "$dir/wake.json"
	psql -X -q -c "ALTER SYSTEM SET max_connections = 250"	# 200 idle workers
	cluster_restart
	# retention is measured once, with the preload's background worker
	/usr/bin/python3 "$top/bench/wake.py" --mode poll --rows latency,lease,idle,throughput
	if psql -X -q -c "ALTER SYSTEM SET shared_preload_libraries = 'distlock'" &&
		cluster_restart; then
		/usr/bin/python3 "$top/bench/wake.py" --mode preload --only-waiting
	else
		echo "warning: could not restart with distlock preloaded; those rows are left out" >&2
	fi
	/usr/bin/python3 "$top/bench/wake.py" --rows none --report
fi
