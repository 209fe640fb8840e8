#!/bin/bash
# test/scripts/plans.sh -- plans that cannot go bad: a backend that made
# its plans while distlock's tables were empty (after the install, a
# TRUNCATE, a DELETE and VACUUM) still finds every row of a lease, session
# or throttle call by index once the tables have filled and before anything
# analyses them.  A generic plan is kept until the table is analysed; a
# sequential scan chosen on the empty table would read the whole table on
# every call (src/exec.c).
#
# Counts, in one transaction of one backend, the blocks each call reads
# from distlock's tables and their indexes (pg_stat_get_xact_blocks_fetched,
# deterministic for a plan), with the plans made on empty tables, then in a
# new backend after ANALYZE; asserts the first within 1.5 times the second.
set -euo pipefail
. "$(dirname "$0")/common.sh"
test_cluster_start plans "autovacuum = off"
FILL=${FILL:-50000}
THROTTLES=${THROTTLES:-9000}	# below a role's limit of 10,000
psql -c "CREATE EXTENSION distlock"
# the filling rows are another role's, so that the measuring role's
# limits of sessions and lock names are not reached
psql -c "CREATE ROLE filler"

# Blocks this transaction read so far from each of the three tables with
# their indexes, into psql variables $1_locks, $1_sessions, $1_throttles
# (variables, not a temporary table: creating one would invalidate every
# cached plan, and so replan them).
blocks_sql()
{
	cat <<SQL
SELECT sum(pg_stat_get_xact_blocks_fetched(c.oid)) FILTER (WHERE t.relname = 'locks') AS $1_locks,
	   sum(pg_stat_get_xact_blocks_fetched(c.oid)) FILTER (WHERE t.relname = 'sessions') AS $1_sessions,
	   sum(pg_stat_get_xact_blocks_fetched(c.oid)) FILTER (WHERE t.relname = 'throttles') AS $1_throttles
  FROM pg_class c
  JOIN pg_class t ON t.oid = coalesce((SELECT indrelid FROM pg_index WHERE indexrelid = c.oid), c.oid)
 WHERE c.relnamespace = 'distlock'::regnamespace \gset
SQL
}

# The calls measured, 20 of each: new lock names (read, insert), renew,
# release; names with a free row (read, grant); heartbeats; throttles with
# a row.  (A new throttle also counts its role's throttles against the
# limit, limits.c, which reads all of them by design.)  Prints the blocks
# per 20 calls' round read from each table and its indexes.
measure_sql()
{
	cat <<SQL
SELECT distlock.session_open('1 hour') AS sid \gset
BEGIN;
$(blocks_sql before)
SELECT count(distlock.try_acquire('$1' || i, 'me', '1 min', :'sid')) FROM generate_series(1, 20) i;
SELECT count(distlock.renew('$1' || i, 'me', '1 min')) FROM generate_series(1, 20) i;
SELECT count(distlock.release('$1' || i, 'me')) FROM generate_series(1, 20) i;
SELECT count(distlock.try_acquire('fill' || i, 'me', '1 min')) FROM generate_series(1, 20) i;
SELECT count(distlock.heartbeat(:'sid')) FROM generate_series(1, 20) i;
SELECT count(distlock.throttle('fill' || i, '1 second', 10)) FROM generate_series(1, 20) i;
$(blocks_sql after)
SELECT t, ((:after_locks - :before_locks) / 20.0)::int FROM (VALUES ('locks')) v(t)
UNION ALL SELECT t, ((:after_sessions - :before_sessions) / 20.0)::int FROM (VALUES ('sessions')) v(t)
UNION ALL SELECT t, ((:after_throttles - :before_throttles) / 20.0)::int FROM (VALUES ('throttles')) v(t);
ROLLBACK;
SQL
}

# One backend: plans made on the empty, vacuumed tables, then the fill
# (no ANALYZE, and autovacuum is off), then the measure.
{
	cat <<SQL
VACUUM ANALYZE distlock.locks, distlock.sessions, distlock.throttles;
SELECT distlock.session_open('1 hour') AS warm \gset
SELECT distlock.try_acquire('warm', 'me', '1 min', :'warm');
SELECT distlock.renew('warm', 'me', '1 min');
SELECT distlock.release('warm', 'me');
SELECT distlock.try_acquire('warm', 'me', '1 min');
SELECT distlock.heartbeat(:'warm');
SELECT distlock.throttle('warm', '1 second', 10);
SELECT distlock.throttle('warm', '1 second', 10);
INSERT INTO distlock.locks (name, token, acquired_at, renewed_at, created_by)
	SELECT 'fill' || i, 1, now(), now(), 'filler'::regrole
	  FROM generate_series(1, $FILL) i;
INSERT INTO distlock.sessions (id, ttl, created_at, heartbeat_at, expires_at, created_by)
	SELECT gen_random_uuid(), '1 hour', now(), now(), now() + interval '1 hour',
		   'filler'::regrole
	  FROM generate_series(1, $FILL) i;
INSERT INTO distlock.throttles (owner, name, every, burst, permits, refilled_at,
								granted_at, created_by)
	SELECT current_user::regrole, 'fill' || i, '1 second', 10, 5, now(), now(),
		   current_user::regrole
	  FROM generate_series(1, $THROTTLES) i;
SQL
	measure_sql stale
} | psql -At -F ' ' >"$dir/stale.out"
psql -c "ANALYZE distlock.locks, distlock.sessions, distlock.throttles"
measure_sql analysed | psql -At -F ' ' >"$dir/analysed.out"

for t in locks sessions throttles; do
	s=$(awk -v t=$t '$1 == t { print $2 }' "$dir/stale.out")
	a=$(awk -v t=$t '$1 == t { print $2 }' "$dir/analysed.out")
	if [ -n "$s" ] && [ -n "$a" ] && awk -v s="$s" -v a="$a" 'BEGIN { exit !(s <= 1.5 * a + 1) }'; then
		echo "ok - $t, plans made on the empty table, then filled: $s blocks per call ($a analysed)"
	else
		echo "not ok - $t, plans made on the empty table, then filled: '$s' blocks per call ('$a' analysed)"
	fi
done
