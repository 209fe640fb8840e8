#!/bin/bash
# test/scripts/prepare.sh -- distlock and PREPARE TRANSACTION, with shared
# memory (distlock preloaded).
#
# A transaction that made jobs pending, claimed them or heartbeated cannot
# be prepared (0A000, README "Claim positions" and "Sessions"): its end
# would come from another backend, or after a restart, and move no claim
# position back and keep no heartbeat's promise.  The refusal rolls the
# transaction back.  An acknowledgement (completing or, with
# distlock.delete_completed, deleting its job) may be prepared: the
# prepared transaction keeps the session's use lock, so reaping skips the
# session and session_close waits until COMMIT PREPARED, and the job is
# never handed back while the acknowledgement is in doubt.
set -euo pipefail
. "$(dirname "$0")/common.sh"
test_cluster_start prepare \
	"shared_preload_libraries = 'distlock'" \
	"distlock.maintenance_naptime = 0" \
	"max_prepared_transactions = 4"
psql -c "CREATE EXTENSION distlock"
# a statement that waits for a prepared transaction fails instead of
# hanging the test
export PGOPTIONS="-c lock_timeout=10s"

# One psql session reading stdin, going on after errors, which it prints
# as their SQLSTATE alone; its output (rows unaligned) on stdout.
session() { command psql -X -q -At -v VERBOSITY=sqlstate 2>&1; }
sql() { command psql -X -q -At -c "$1"; }

sid=$(sql "SELECT distlock.session_open('1 hour', 'w')")
sql "SELECT distlock.enqueue('q', jsonb_build_object('n', i)) FROM generate_series(1, 3) i" >/dev/null

# In one transaction: SETUP (a statement, or none), then CALL, then PREPARE
# TRANSACTION; $out is what the session printed.
prepare_after()
{
	out=$(session <<SQL
$2
BEGIN;
SELECT $1;
PREPARE TRANSACTION 'p';
SQL
)
}
# refused WHAT CALL: PREPARE TRANSACTION after CALL raises 0A000.
refused()
{
	prepare_after "$2" ""
	check "PREPARE TRANSACTION after $1 raises 0A000" "$(echo "$out" | tail -1)" "ERROR:  0A000"
}

# --- refused: a claim, an enqueue, a retry, a heartbeat ----------------------
refused "a claim" "count(*) FROM distlock.claim('q', '$sid')"
check "the refused claim is rolled back" \
	"$(sql "SELECT count(*) FILTER (WHERE status = 'pending') || ' ' || count(*) FROM distlock.jobs")" "3 3"
refused "an enqueue" "distlock.enqueue('q') > 0"
check "the refused enqueue is rolled back" "$(sql "SELECT count(*) FROM distlock.jobs")" 3
j=$(sql "SELECT id FROM distlock.claim('q', '$sid')")
refused "a fail that retries" "distlock.fail($j, '$sid', 'again', '0 s')"
check "the refused retry is rolled back" "$(sql "SELECT status FROM distlock.jobs WHERE id = $j")" running
refused "a heartbeat" "distlock.heartbeat('$sid')"
check "no prepared transaction was left by the refusals" \
	"$(sql "SELECT count(*) FROM pg_prepared_xacts")" 0

# --- allowed: an acknowledgement, held by the prepared transaction -----------
expire() { sql "UPDATE distlock.sessions SET expires_at = clock_timestamp() - interval '1 second' WHERE id = '$sid'"; }

prepare_after "distlock.complete($j, '$sid')" ""
check "an acknowledgement can be prepared" "$out" t
out=$(session <<SQL
SET lock_timeout = '300ms';
SELECT distlock.session_close('$sid');
SQL
)
check "session_close waits for the prepared acknowledgement (55P03 after lock_timeout)" "$out" "ERROR:  55P03"
expire
check "reaping skips the session while the prepared acknowledgement holds it" \
	"$(sql "SELECT distlock.reap()") $(sql "SELECT status FROM distlock.jobs WHERE id = $j")" "0 running"
sql "COMMIT PREPARED 'p'"
check "COMMIT PREPARED completes the job, and the session is reaped without it" \
	"$(sql "SELECT distlock.reap()") $(sql "SELECT status FROM distlock.jobs WHERE id = $j")" "1 completed"

# the same, deleting: ROLLBACK PREPARED gives the job back to its session,
# which acknowledges it again
sid=$(sql "SELECT distlock.session_open('1 hour', 'w')")
j=$(sql "SELECT id FROM distlock.claim('q', '$sid')")
prepare_after "distlock.complete($j, '$sid')" "SET distlock.delete_completed = on;"
check "a deleting acknowledgement can be prepared" "$out" t
sql "ROLLBACK PREPARED 'p'"
check "ROLLBACK PREPARED leaves the job running for its session" \
	"$(sql "SELECT status FROM distlock.jobs WHERE id = $j AND session_id = '$sid'")" running
prepare_after "distlock.complete($j, '$sid')" "SET distlock.delete_completed = on;"
expire
check "reaping skips the session while the prepared deletion holds it" \
	"$(sql "SELECT distlock.reap()") $(sql "SELECT count(*) FROM distlock.jobs WHERE id = $j")" "0 1"
sql "COMMIT PREPARED 'p'"
check "COMMIT PREPARED deletes the job, and the session is reaped without it" \
	"$(sql "SELECT distlock.reap()") $(sql "SELECT count(*) FROM distlock.jobs WHERE id = $j")" "1 0"
check "one job is left pending, none running" \
	"$(sql "SELECT string_agg(status::text, ' ' ORDER BY id) FROM distlock.jobs WHERE status <> 'completed'")" pending

# distlock.advisory_locks shows an advisory lock a prepared transaction
# holds (no backend, so no pg_stat_activity row), and none of another
# database's
sql "CREATE DATABASE other"
command psql -X -q -d other -c "BEGIN" -c "SELECT pg_advisory_xact_lock(4242)" \
	-c "PREPARE TRANSACTION 'other'" >/dev/null
session >/dev/null <<'SQL'
BEGIN;
SELECT pg_advisory_xact_lock(4343);
PREPARE TRANSACTION 'here';
SQL
check "advisory_locks shows the prepared transaction's lock, and only this database's" \
	"$(sql "SELECT string_agg(key || ':' || mode || ':' || granted || ':' || (pid IS NULL), ' ' ORDER BY key)
		FROM distlock.advisory_locks WHERE key IN (4242, 4343)")" "4343:ExclusiveLock:true:true"
sql "COMMIT PREPARED 'here'"
command psql -X -q -d other -c "COMMIT PREPARED 'other'"

# A subtransaction's abort lowers the claim positions once, whichever of
# two callbacks comes first; what it remembers must not outlive its
# transaction.  A transaction that made no position note but woke waiters
# (an enqueue into a queue whose name takes no position) and rolled back a
# savepoint is prepared; then, in the same connection, a claim rolled back
# to a savepoint of the same number must still give its job back to the
# claims after it.
sid=$(sql "SELECT distlock.session_open('1 hour', 'w')")
sql "SELECT distlock.enqueue('pq') > 0" >/dev/null
out=$(session <<SQL
BEGIN;
SELECT distlock.enqueue(repeat('x', 64)) > 0;
SAVEPOINT s;
ROLLBACK TO SAVEPOINT s;
PREPARE TRANSACTION 'woke';
BEGIN;
SAVEPOINT a;
SELECT count(*) FROM distlock.claim('pq', '$sid');
ROLLBACK TO SAVEPOINT a;
COMMIT;
SQL
)
check "a claim rolled back to a savepoint after a prepared transaction's" "$out" "t
1"
check "... gives its job back to the next claim" \
	"$(sql "SELECT count(*) FROM distlock.claim('pq', '$sid')")" 1
sql "COMMIT PREPARED 'woke'"
