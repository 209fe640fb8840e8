# test/scripts/cycles.sh -- claim + complete cycles and the buffer accesses
# they make, for claim_scale.sh and claim_held.sh.
#
# Sourced after common.sh, once the cluster runs:
#
#	cycles_setup OWNER	installs distlock and opens a session (owner
#						OWNER) whose cycles claim from queue 'hot'
#	cycles_run NAME		runs CYCLES cycles with pgbench, one transaction
#						each, as a worker would; sets blocks_NAME (shared-
#						buffer accesses to distlock's relations per cycle,
#						from pg_statio: deterministic for a given plan, so
#						asserted on) and lat_NAME (ms per cycle, printed
#						only: wall time on a shared machine is no test);
#						fails if a pending job with payload key 'i' is left
#						in 'hot'
#	cycles_flushed		waits until pgbench's backends have reported
#						their statistics
#	cycles_ratio A B	A / B to two places
#	cycles_check LIMIT LABEL NAME BASE BASE_TEXT
#						"ok - LABEL" if blocks_NAME < LIMIT times
#						blocks_BASE, "not ok - LABEL" otherwise, with
#						both ratios ("x BASE_TEXT buffer accesses")

# Wait until pgbench's backends have gone.  A backend reports its
# statistics on exit before it leaves pg_stat_activity (pgstat.c's
# before_shmem_exit hook runs before backend_status.c's on_shmem_exit one),
# so once none is left, pg_statio counts all their accesses.
cycles_flushed()
{
	local i
	for i in $(seq 1 100); do
		[ "$(psql -At -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgbench'")" = 0 ] && return 0
		sleep 0.1
	done
	echo "not ok - pgbench's backend still there after 10 s"
	exit 1
}

cycles_setup()
{
	psql -c "CREATE EXTENSION distlock"
	sid=$(psql -At -c "SELECT distlock.session_open('1 hour', '$1')")
	cycle="$dir/cycle.sql"
	echo "SELECT distlock.complete(id, :sid) FROM distlock.claim('hot', :sid);" >"$cycle"
	chmod 644 "$cycle"
}

# Buffer accesses (hits + reads) to distlock's relations so far.
cycles_blocks()
{
	psql -At -c "
		SELECT coalesce(sum(coalesce(heap_blks_hit, 0) + coalesce(heap_blks_read, 0)
						  + coalesce(idx_blks_hit, 0) + coalesce(idx_blks_read, 0)), 0)
		  FROM pg_statio_all_tables WHERE schemaname = 'distlock'"
}

cycles_run()
{
	local name=$1 b0 b1 lat left
	b0=$(cycles_blocks)
	"$PG_BINDIR/pgbench" -n -M prepared -c 1 -t "$CYCLES" -D sid="$sid" \
		-f "$cycle" >"$dir/pgbench.log" 2>&1 || { cat "$dir/pgbench.log"; exit 1; }
	lat=$(awk '/latency average/ { print $4 }' "$dir/pgbench.log")
	cycles_flushed
	b1=$(cycles_blocks)
	left=$(psql -At -c "SELECT count(*) FROM distlock.jobs WHERE queue_owner = current_user::regrole AND queue = 'hot' AND status = 'pending' AND payload ? 'i'")
	[ "$left" -eq 0 ] || { echo "not ok - $name: $left hot jobs left unclaimed"; exit 1; }
	eval "blocks_$name=$(( (b1 - b0) / CYCLES ))"
	eval "lat_$name=$lat"
	printf '%-28s %8s blocks/cycle %10s ms/cycle\n' "$name" "$(( (b1 - b0) / CYCLES ))" "$lat"
}

cycles_ratio()
{
	awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'
}

cycles_check()
{
	local limit=$1 label=$2 name=$3 base=$4 text=$5 ratio lr verdict="ok"
	ratio=$(cycles_ratio "$(eval echo "\$blocks_$name")" "$(eval echo "\$blocks_$base")")
	lr=$(cycles_ratio "$(eval echo "\$lat_$name")" "$(eval echo "\$lat_$base")")
	awk -v r="$ratio" -v l="$limit" 'BEGIN { exit !(r < l) }' || verdict="not ok"
	echo "$verdict - $label: $ratio x $text buffer accesses (latency $lr x)"
}
