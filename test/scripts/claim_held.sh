#!/bin/bash
# test/scripts/claim_held.sh -- the claim positions (src/position.c): with
# distlock preloaded, a claim's cost does not grow with the index entries
# earlier claims left behind while a transaction holds vacuum back; under
# concurrent enqueues and claims no job is ever skipped or claimed twice;
# and a job whose enqueue commits inside a claim call, after the claim's
# snapshot, is taken by the next claim (position.c's ring of lowerings).
#
# The cost is measured, as in claim_scale.sh, in shared-buffer accesses to
# distlock's relations per claim + complete cycle (deterministic, so
# asserted; latency is printed for information only).  Without positions
# each claim would step over every entry left since the horizon was taken:
# here DEAD of them, and then the run's own.
set -euo pipefail
. "$(dirname "$0")/common.sh"
. "$(dirname "$0")/cycles.sh"
test_cluster_start held "autovacuum = off" "shared_buffers = 256MB" \
	"shared_preload_libraries = 'distlock'" "distlock.maintenance_naptime = 0"
CYCLES=${CYCLES:-400}
DEAD=${DEAD:-20000}
cycles_setup held

# cycles NAME: CYCLES + 1 fresh jobs, one cycle to warm up (the group's
# first claim after a restart walks it from its start), then CYCLES.
cycles()
{
	psql -c "SELECT distlock.enqueue('hot', jsonb_build_object('i', i)) FROM generate_series(0, $CYCLES) i" >/dev/null
	"$PG_BINDIR/pgbench" -n -M prepared -c 1 -t 1 -D sid="$sid" -f "$cycle" >/dev/null 2>&1
	cycles_flushed
	cycles_run "$1"
}

echo "claim + complete, $CYCLES cycles"
psql -c "VACUUM ANALYZE distlock.jobs"
cycles vacuumed

# A transaction with an xid holds the horizon; then DEAD jobs are enqueued
# and claimed (in batches of 1000), leaving DEAD entries that no vacuum
# and no pruning can remove while it lasts, ahead of every job to come.
psql -c "BEGIN; SELECT pg_current_xact_id(); SELECT pg_sleep(600)" >/dev/null 2>&1 &
holder=$!
stop_holder()
{
	kill "$holder" 2>/dev/null || true
}
test_on_exit=stop_holder
for _ in $(seq 100); do
	[ "$(psql -At -c "SELECT count(*) FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND query LIKE '%pg_sleep(600)%'")" = 1 ] && break
	sleep 0.1
done
psql -c "SELECT count(distlock.enqueue('hot', '{}')) FROM generate_series(1, $DEAD)" >/dev/null
psql -c "DO \$\$ BEGIN FOR i IN 1..($DEAD + 999) / 1000 LOOP
	PERFORM distlock.claim('hot', '$sid', 1000); END LOOP; END \$\$"
psql -c "VACUUM distlock.jobs"
cycles held

cycles_check 1.5 "claim beside $DEAD dead entries and its run's own, vacuum held back" held vacuumed "the after-VACUUM"
stop_holder
wait "$holder" 2>/dev/null || true

# Concurrent producers and claimers, the producers' jobs due at random
# times in the past and at random priorities, so that most land before
# the positions the claims leave; then a drain.  A job a position skipped
# would be left pending; one claimed twice would show two attempts.
psql -c "CREATE TABLE sess AS SELECT n, distlock.session_open('1 hour', 'mix' || n) AS id
		 FROM generate_series(1, 4) n; GRANT SELECT ON sess TO PUBLIC"
cat >"$dir/produce.sql" <<'SQL'
SELECT distlock.enqueue('mix', '{}', now() - random() * interval '10 seconds', (random() * 2)::int);
SQL
cat >"$dir/consume.sql" <<'SQL'
SELECT distlock.complete(j.id, s.id) FROM sess s, distlock.claim('mix', s.id) j WHERE s.n = :client_id % 4 + 1;
SQL
chmod 644 "$dir/produce.sql" "$dir/consume.sql"
"$PG_BINDIR/pgbench" -n -M prepared -c 4 -j 2 -T "${MIX_SECS:-8}" \
	-f "$dir/produce.sql@2" -f "$dir/consume.sql@1" >"$dir/mix.log" 2>&1 ||
	{ cat "$dir/mix.log"; exit 1; }
psql -c "DO \$\$ BEGIN
	WHILE EXISTS (SELECT FROM distlock.claim('mix', (SELECT id FROM sess WHERE n = 1), 1000)) LOOP
	END LOOP; END \$\$"
read -r total pending twice <<<"$(psql -At -F ' ' -c "
	SELECT count(*), count(*) FILTER (WHERE status = 'pending'),
		   count(*) FILTER (WHERE attempts > 1)
	  FROM distlock.jobs WHERE queue = 'mix'")"
echo "$total jobs enqueued under concurrent claims"
check "concurrent enqueues before the positions: no job left pending after the drain" "$pending" 0
check "concurrent enqueues before the positions: no job claimed twice" "$twice" 0

# A commit that lands inside one claim call, after the claim took its
# snapshot and before it moves the position: the claim cannot see the job,
# so the position it sets must still let the next claim find it (the
# lowering the commit made after the claim read the generation).  A
# transaction holds WALK uncommitted jobs open, which every claim from the
# start of the group walks without seeing them; a job due before them all
# is enqueued while such a walk is under way, then the transaction rolls
# back.  Whether a commit landed in the window is read from the clocks: the
# walker returned nothing and ended after the enqueue had committed.
WALK=${WALK:-300000}
PGAPPNAME=walk_holder psql -c "BEGIN; SELECT count(distlock.enqueue('walk', '{}', now() - interval '1 hour' + g * interval '1 ms'))
		 FROM generate_series(1, $WALK) g; SELECT pg_sleep(600)" >/dev/null 2>&1 &
holder=$!
for _ in $(seq 1200); do
	[ "$(psql -At -c "SELECT count(*) FROM pg_stat_activity
					   WHERE application_name = 'walk_holder' AND wait_event = 'PgSleep'")" = 1 ] && break
	sleep 0.1
done
walker=$(psql -At -c "SELECT id FROM sess WHERE n = 1")
# a job due before all of the open transaction's, and a claim that takes it
before="SELECT distlock.enqueue('walk', '{}', now() - interval '2 hours')"
take="SELECT count(distlock.complete(id, '$walker')) FROM distlock.claim('walk', '$walker')"
# a claim from such a job: the walk's length
psql -At -c "$before" -c "$take" >/dev/null
walk_ms=$(psql -At -c "$before" -c "\timing on" -c "$take" -c "$take" |
	awk '/^Time:/ { ms = $2 } END { printf "%d", ms }')
echo "a claim walks $WALK uncommitted entries in $walk_ms ms"
hits=0 lost=0 trials=0
while [ "$hits" -lt 3 ] && [ "$trials" -lt 20 ]; do
	trials=$((trials + 1))
	# the position is past the walk; a job before it brings the next claim
	# back to the walk's start
	psql -At -c "$before" -c "$take" >/dev/null
	psql -At -c "SELECT coalesce((SELECT id::text FROM distlock.claim('walk', '$walker')), 'none')" \
		-c "SELECT clock_timestamp()" >"$dir/walk.out" &
	walking=$!
	sleep "$(awk -v ms="$walk_ms" 'BEGIN { printf "%.3f", ms / 3000 }')"
	read -r k committed <<<"$(psql -At -c "$before" -c "SELECT clock_timestamp()" | tr '\n' ' ')"
	wait "$walking"
	{ read -r got; read -r ended; } <"$dir/walk.out"
	next=$(psql -At -c "SELECT coalesce((SELECT id::text FROM distlock.claim('walk', '$walker')), 'none')")
	if [ "$got" = none ] &&
		[ "$(psql -At -c "SELECT '$committed'::timestamptz < '$ended'")" = t ]; then
		hits=$((hits + 1))
	fi
	[ "$got" = "$k" ] || [ "$next" = "$k" ] || lost=$((lost + 1))
	psql -At -c "SELECT count(distlock.complete(id, '$walker')) FROM distlock.jobs
				 WHERE queue = 'walk' AND status = 'running'" >/dev/null
done
psql -At -c "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'walk_holder'" >/dev/null
wait "$holder" 2>/dev/null || true
echo "$hits of $trials enqueues committed while a claim walked"
check "a commit inside a claim call: the walker or the next claim takes the job, every time" "$lost" 0
check "a commit landed inside a claim call (after its snapshot) at least once" "$([ "$hits" -ge 1 ] && echo yes || echo no)" yes
check "once the open transaction rolls back, nothing pending is left in the walk's queue" \
	"$(psql -At -c "SELECT count(*) FROM distlock.jobs WHERE queue = 'walk' AND status = 'pending'")" 0
