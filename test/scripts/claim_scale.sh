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
. "$(dirname "$0")/cycles.sh"
test_cluster_start scale "autovacuum = off" "shared_buffers = 256MB"

CYCLES=${CYCLES:-500}

cycles_setup scale

# measure NAME: CYCLES fresh 'hot' jobs (priority 0, due now, so claimed
# before any background job of the scenario), vacuum, then CYCLES
# claim + complete cycles, which must take exactly those jobs.  Scenarios
# accumulate: each keeps the background of the ones before it.
measure()
{
	psql -c "SELECT distlock.enqueue('hot', jsonb_build_object('i', i)) FROM generate_series(1, $CYCLES) i" >/dev/null
	psql -c "VACUUM ANALYZE distlock.jobs"
	sleep 0.6
	cycles_run "$1"
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
cycles_check 2.0 "claim beside 300,000 finished jobs" finished_300k empty "the empty case's"
cycles_check 2.0 "claim beside 200,000 pending jobs of another queue" other_queue_200k empty "the empty case's"
cycles_check 2.0 "claim beside 200,000 delayed jobs of its own queue" own_queue_200k_delayed empty "the empty case's"
cycles_check 2.0 "claim beside 200,000 due jobs of its own queue" own_queue_200k_due empty "the empty case's"
# The flood, against the scenario just before it: the other role's jobs add
# no more than any 200,000 rows the claim never reads (each scenario adds a
# few blocks, as the indexes it descends grow a level).
cycles_check 1.25 "claim beside another role's 200,000 first-in-order jobs in a queue of that name" other_role_200k_same_name own_queue_200k_due "the without-them"
