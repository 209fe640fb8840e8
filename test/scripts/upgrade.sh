#!/bin/bash
# test/scripts/upgrade.sh -- every upgrade path ends where a fresh install is.
#
# For each upgrade script sql/distlock--A--B.sql: install version A, put
# state in it, ALTER EXTENSION distlock UPDATE to the default version, and
# compare pg_dump --schema-only of the result with a fresh install of the
# default version; the state must survive the update and keep working,
# and a dump of version A, restored into A and updated, too.
# (pg_dump --schema-only shows only "CREATE EXTENSION" for an extension, so
# the comparison is of test/scripts/catalog.sql's listing of its objects.
# While the default version has no full script of its own, a fresh install
# runs the same chain; the comparison bites once such a script exists.)
set -euo pipefail
. "$(dirname "$0")/common.sh"
test_cluster_start upgrade

current=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$top/distlock.control")
schema_dump()
{
	psql -At -d "$1" -f "$top/test/scripts/catalog.sql" >"$dir/$1.schema"
}

psql -c "CREATE DATABASE fresh" -c "CREATE ROLE producer"
psql -d fresh -c "CREATE EXTENSION distlock"
schema_dump fresh

found=0
for script in "$top"/sql/distlock--*--*.sql; do
	[ -e "$script" ] || continue
	from=$(basename "$script" .sql | sed 's/^distlock--\([^-]*\)--.*/\1/')
	found=$((found + 1))
	db="from_${from//./_}"
	psql -c "CREATE DATABASE $db"
	psql -d "$db" -c "CREATE EXTENSION distlock VERSION '$from'" >/dev/null
	# The installed library is the default version's, which refuses to run
	# on an older catalog (it would write columns that are not there) and
	# says to update; the older version's state is therefore written as
	# its functions wrote it.
	refusal=$(psql -d "$db" -c "SELECT distlock.try_acquire('kept', 'w', NULL)" 2>&1 || true)
	if grep -q "ALTER EXTENSION distlock UPDATE" <<<"$refusal"; then
		echo "ok - the $current library on a $from catalog asks for the update"
	else
		echo "not ok - the $current library on a $from catalog: $refusal"
	fi
	psql -d "$db" >/dev/null <<'SQL'
INSERT INTO distlock.locks (name, owner, token, acquired_at, renewed_at, created_by)
	VALUES ('kept', 'w', nextval('distlock.token_seq'), now(), now(), current_user::regrole);
INSERT INTO distlock.jobs (queue, payload, status, priority, run_at, attempts,
						   max_attempts, created_at, created_by)
	VALUES ('q', '{"kept": true}', 'pending', 0, now(), 0, 5, now(), current_user::regrole),
		   ('pq', '{"producer": true}', 'pending', 0, now(), 0, 5, now(), 'producer'),
		   ('pq', '{"done": true}', 'completed', 0, now(), 1, 5, now(), 'producer');
UPDATE distlock.jobs SET finished_at = now() WHERE status = 'completed';
INSERT INTO distlock.throttles (name, every, burst, permits, refilled_at, granted_at, created_by)
	VALUES ('t', '1 hour', 3, 1, now(), now(), 'producer');
SQL
	as_owner "$PG_BINDIR/pg_dump" -h "$PGHOST" -p "$PGPORT" -U postgres -Fc \
		-f "$dir/$db.dump" "$db"
	psql -d "$db" -c "ALTER EXTENSION distlock UPDATE"
	version=$(psql -At -d "$db" -c "SELECT extversion FROM pg_extension WHERE extname = 'distlock'")
	if [ "$version" = "$current" ]; then
		echo "ok - $from updates to $current"
	else
		echo "not ok - $from updated to $version, not $current"
	fi
	schema_dump "$db"
	if diff -u "$dir/fresh.schema" "$dir/$db.schema" >"$dir/$db.diff"; then
		echo "ok - $from -> $current: schema identical to a fresh install"
	else
		echo "not ok - $from -> $current: schema differs from a fresh install"
		head -50 "$dir/$db.diff"
	fi
	# a job enqueued before the update is in its creator's queue
	state=$(psql -At -d "$db" -c "SELECT distlock.try_acquire('kept', 'w', NULL) IS NOT NULL,
		(SELECT count(*) FROM distlock.jobs WHERE payload ? 'kept'),
		(SELECT count(*) FROM distlock.claim('q', distlock.session_open('1 minute'))
		  WHERE payload ? 'kept')")
	if [ "$state" = "t|1|1" ]; then
		echo "ok - $from -> $current: locks and jobs survive the update, the jobs claimable"
	else
		echo "not ok - $from -> $current: state after update is '$state'"
	fi
	# another role's jobs, finished ones too, go to its queue, and its
	# throttle stays its own: the bucket it drew on, with the permits left
	state=$(psql -At -d "$db" -c "SELECT
		(SELECT string_agg(status || ':' || queue_owner, ',' ORDER BY status)
		   FROM distlock.jobs WHERE queue = 'pq'),
		(SELECT count(*) FROM distlock.claim('pq', distlock.session_open('1 minute'),
											 owner => 'producer')
		  WHERE payload ? 'producer'),
		(SELECT available FROM distlock.throttle_status('t', 'producer'))")
	if [ "$state" = "pending:producer,completed:producer|1|1" ]; then
		echo "ok - $from -> $current: another role's jobs are in its queue, its throttle its own"
	else
		echo "not ok - $from -> $current: another role's state after update is '$state'"
	fi
	# a dump of version A restores into A created beforehand (pg_dump's
	# CREATE EXTENSION names no version), then updates like the original
	psql -c "CREATE DATABASE ${db}_restored"
	psql -d "${db}_restored" -c "CREATE EXTENSION distlock VERSION '$from'" >/dev/null
	as_owner "$PG_BINDIR/pg_restore" -h "$PGHOST" -p "$PGPORT" -U postgres \
		-d "${db}_restored" "$dir/$db.dump" 2>"$dir/$db.restore.err" || true
	psql -d "${db}_restored" -c "ALTER EXTENSION distlock UPDATE" 2>>"$dir/$db.restore.err" || true
	state=$(psql -At -d "${db}_restored" -c "SELECT
		(SELECT string_agg(queue || ':' || status || ':' || queue_owner, ','
						   ORDER BY queue, status) FROM distlock.jobs),
		(SELECT owner || ':' || permits FROM distlock.throttles)" 2>&1 || true)
	if [ "$state" = "pq:pending:producer,pq:completed:producer,q:pending:postgres|producer:1" ] &&
		[ ! -s "$dir/$db.restore.err" ]; then
		echo "ok - a $from dump restores into $from and updates to $current"
	else
		echo "not ok - a $from dump restored and updated: '$state'"
		sed 's/^/# /' "$dir/$db.restore.err"
	fi
done
if [ "$found" -eq 0 ]; then
	echo "not ok - no upgrade script found under sql/"
fi
