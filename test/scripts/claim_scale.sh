#!/bin/bash
# test/scripts/claim_scale.sh -- claim cost does not grow with finished jobs,
# with pending jobs of other queues (another role's queue of the same name
# among them), or (beyond a log factor) with pending jobs of its own queue.
#
# Runs claim + complete cycles with pgbench (one transaction per cycle, as a
# worker would) against a queue beside different backgrounds, and measures
# two things per cycle: shared-buffer accesses to distlock's tables and
# indexes (from pg_statio, deterministic for a given plan, so the test
# asserts on it) and latency (from pgbench, printed for information only,
# since wall time on a shared machine is not a test).  Each scenario starts
# from a vacuumed table, as a queue in steady state under autovacuum is.
#
# Runs are short (CYCLES, default 500) on purpose: every claim also steps
# over the index entries of the jobs claimed before it in the same run
# (killed, but removed only by vacuum), a cost that grows with the run's
# length whatever the background, and would drown the effect measured here.
set -euo pipefail
. "$(dirname "$0")/common.sh"
test_cluster_start scale "autovacuum = off" "shared_buffers = 256MB"

CYCLES=${CYCLES:-500}

psql -c "CREATE EXTENSION distlock"
sid=$(psql -At -c "SELECT distlock.session_open('1 hour', 'scale')")
cycle="$dir/cycle.sql"
echo "SELECT distlock.complete(id, :sid) FROM distlock.claim('hot', :sid);" >"$cycle"
chmod 644 "$cycle"

# Buffer accesses (hits + reads) to distlock's relations so far.
blocks()
{
	psql -At -c "
		SELECT coalesce(sum(coalesce(heap_blks_hit, 0) + coalesce(heap_blks_read, 0)
						  + coalesce(idx_blks_hit, 0) + coalesce(idx_blks_read, 0)), 0)
		  FROM pg_statio_all_tables WHERE schemaname = 'distlock'"
}

# measure NAME: CYCLES fresh 'hot' jobs (priority 0, due now, so claimed
# before any background job of the scenario), vacuum, then CYCLES
# claim + complete cycles, which must take exactly those jobs.  Scenarios
# accumulate: each keeps the background of the ones before it.
measure()
{
	local name=$1 b0 b1 lat
	psql -c "SELECT distlock.enqueue('hot', jsonb_build_object('i', i)) FROM generate_series(1, $CYCLES) i" >/dev/null
	psql -c "VACUUM ANALYZE distlock.jobs"
	sleep 0.6
	b0=$(blocks)
	"$PG_BINDIR/pgbench" -n -M prepared -c 1 -t "$CYCLES" -D sid="$sid" \
		-f "$cycle" >"$dir/pgbench.log" 2>&1 || { cat "$dir/pgbench.log"; exit 1; }
	lat=$(awk '/latency average/ { print $4 }' "$dir/pgbench.log")
	sleep 1.1				# pgbench's backend flushes its statistics on exit
	b1=$(blocks)
	left=$(psql -At -c "SELECT count(*) FROM distlock.jobs WHERE queue_owner = current_user::regrole AND queue = 'hot' AND status = 'pending' AND payload ? 'i'")
	[ "$left" -eq 0 ] || { echo "not ok - $name: $left hot jobs left unclaimed"; exit 1; }
	eval "blocks_$name=$(( (b1 - b0) / CYCLES ))"
	eval "lat_$name=$lat"
	printf '%-28s %8s blocks/cycle %10s ms/cycle\n' "$name" "$(( (b1 - b0) / CYCLES ))" "$lat"
}

echo "claim + complete, $CYCLES cycles per scenario"
measure empty

psql -c "INSERT INTO distlock.jobs (queue, payload, status, priority, run_at, attempts,
			max_attempts, finished_at, created_at, created_by, queue_owner)
		 SELECT 'hot', '{}', 'completed', 0, t, 1, 5, t, t, current_user::regrole,
				current_user::regrole
		   FROM (SELECT clock_timestamp() AS t FROM generate_series(1, 300000)) s"
measure finished_300k

psql -c "SELECT count(distlock.enqueue('cold', '{}')) FROM generate_series(1, 200000)" >/dev/null
measure other_queue_200k

psql -c "SELECT count(distlock.enqueue('hot', '{}', run_at => clock_timestamp() + interval '1 day')) FROM generate_series(1, 200000)" >/dev/null
measure own_queue_200k_delayed

psql -c "SELECT count(distlock.enqueue('hot', '{}', priority => -1)) FROM generate_series(1, 200000)" >/dev/null
measure own_queue_200k_due

# Another role floods a queue of the same name with jobs that would come
# first in claim order, were they in the path (they were, before queues
# belonged to a role: each claim stepped over every one of them).
psql -c "CREATE ROLE flooder; GRANT USAGE ON SCHEMA distlock TO flooder" >/dev/null
psql -c "SET ROLE flooder; SELECT count(distlock.enqueue('hot', '{}', priority => 100)) FROM generate_series(1, 200000)" >/dev/null
measure other_role_200k_same_name

# assert: within 2x of the empty case, on buffer accesses
check()
{
	local name=$1 b=$2
	ratio=$(awk -v a="$b" -v e="$blocks_empty" 'BEGIN { printf "%.2f", a / e }')
	lr=$(awk -v a="$3" -v e="$lat_empty" 'BEGIN { printf "%.2f", a / e }')
	if awk -v r="$ratio" 'BEGIN { exit !(r < 2.0) }'; then
		echo "ok - $name: $ratio x the empty case's buffer accesses (latency $lr x)"
	else
		echo "not ok - $name: $ratio x the empty case's buffer accesses (latency $lr x)"
	fi
}
check "claim beside 300,000 finished jobs" "$blocks_finished_300k" "$lat_finished_300k"
check "claim beside 200,000 pending jobs of another queue" "$blocks_other_queue_200k" "$lat_other_queue_200k"
check "claim beside 200,000 delayed jobs of its own queue" "$blocks_own_queue_200k_delayed" "$lat_own_queue_200k_delayed"
check "claim beside 200,000 due jobs of its own queue" "$blocks_own_queue_200k_due" "$lat_own_queue_200k_due"

# The flood, against the scenario just before it: the other role's jobs add
# no more than any 200,000 rows the claim never reads (each scenario adds a
# few blocks, as the indexes it descends grow a level).
ratio=$(awk -v a="$blocks_other_role_200k_same_name" -v e="$blocks_own_queue_200k_due" 'BEGIN { printf "%.2f", a / e }')
if awk -v r="$ratio" 'BEGIN { exit !(r < 1.25) }'; then
	echo "ok - claim beside another role's 200,000 first-in-order jobs in a queue of that name: $ratio x the buffer accesses without them"
else
	echo "not ok - claim beside another role's 200,000 first-in-order jobs in a queue of that name: $ratio x the buffer accesses without them"
fi
