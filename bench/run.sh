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

PG_CONFIG=${PG_CONFIG:-pg_config}
trap 'cluster_stop; rm -rf "$dir"' EXIT
# Preloaded, as users who want its speed run it: the claim positions
# (src/position.c) and the wake-ups live in shared memory.  The background
# worker is stopped, so that no maintenance pass runs into a round.
cluster_start "$dir" \
	"fsync = on" \
	"synchronous_commit = on" \
	"shared_buffers = 512MB" \
	"max_wal_size = 16GB" \
	"checkpoint_timeout = 1h" \
	"autovacuum = off" \
	"shared_preload_libraries = 'distlock'" \
	"distlock.maintenance_naptime = 0" \
	"log_min_messages = warning"
echo "bench cluster: port $PGPORT, pid $CLUSTER_PID, $dir"

psql -X -q -v ON_ERROR_STOP=1 -v pgq=$have_pgq -f "$top/bench/setup.sql" >/dev/null
pgbench -i -q -s 1 -U app postgres >/dev/null 2>&1

BENCH_WORK="$dir" HAVE_PGQ=$have_pgq /usr/bin/python3 "$top/bench/bench.py"

# "e2e" and "wake" are run here, not by bench.py: all of them unless
# WORKLOADS names them.
wanted() { [ -z "${WORKLOADS:-}" ] || [[ " $WORKLOADS " == *" $1 "* ]]; }

# graphile-worker and a Node for it come from the npm registry, cached
# outside the work tree (bench/graphile/install.sh); without them its rows
# are left out.
GRAPHILE_DIR=
if wanted e2e || wanted wake; then
	GRAPHILE_DIR=$("$top/bench/graphile/install.sh") || {
		echo "warning: could not install graphile-worker; its rows are left out" >&2
		GRAPHILE_DIR=
	}
fi
export GRAPHILE_DIR BENCH_WORK="$dir"

# --- End to end against graphile-worker (bench/e2e.py) ---------------------
# Jobs per second through a full queue, 4 and 16 workers: graphile-worker's
# one-job mode and its local queue with batched completion, distlock's
# claim + complete and batches of 10; on this cluster, distlock preloaded.
# WORKLOADS="e2e" runs only these.
if wanted e2e; then
	/usr/bin/python3 "$top/bench/e2e.py"
fi

# --- The waiting calls (bench/wake.py) -------------------------------------
# claim_wait() and acquire() against polling loops and graphile-worker: wake-up
# latency, idle cost, throughput and retention, first without distlock in
# shared_preload_libraries (waiters re-check every distlock.wait_poll_interval),
# then, after a restart with it, the waiting calls' rows again (woken by the
# committing transaction).  WORKLOADS="wake" runs only these.
if wanted wake; then
	rm -f "$dir/wake.json"
	psql -X -q -c "ALTER SYSTEM SET max_connections = 250"	# 200 idle workers
	# first without the shared memory: waiters poll.  Not ALTER SYSTEM: it
	# writes an empty list as '""', a library with no name, and the server
	# would not start (PostgreSQL 15.20).
	echo "shared_preload_libraries = ''" |
		as_owner tee -a "$CLUSTER_DIR/data/postgresql.conf" >/dev/null
	cluster_restart
	# retention is measured once, with the preload's background worker
	/usr/bin/python3 "$top/bench/wake.py" --mode poll --rows latency,lease,idle,throughput
	if psql -X -q -c "ALTER SYSTEM SET shared_preload_libraries = 'distlock'" \
		-c "ALTER SYSTEM SET distlock.maintenance_naptime = 1000" &&
		cluster_restart; then
		/usr/bin/python3 "$top/bench/wake.py" --mode preload --only-waiting
	else
		echo "warning: could not restart with distlock preloaded; those rows are left out" >&2
	fi
	/usr/bin/python3 "$top/bench/wake.py" --rows none --report
fi
