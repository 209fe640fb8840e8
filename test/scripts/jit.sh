#!/bin/bash
# test/scripts/jit.sh -- JIT compiles none of distlock's own statements.
# They are planned with sequential scans off (src/exec.c), so one that can
# only scan (the read of token_seq before a backend's first grant,
# maintain()'s search for free lock rows) costs more than jit_above_cost,
# and JIT would compile it, tens of milliseconds, on every execution.
#
# auto_explain logs every statement's plan, distlock's own included
# (log_nested_statements), with the JIT work its execution did.  A
# statement of the test's own, compiled whatever its cost, shows that this
# server has JIT and that the log shows it; then a round of distlock's
# calls, in a new backend, must show none.
set -euo pipefail
. "$(dirname "$0")/common.sh"
libdir=$("$PG_CONFIG" --pkglibdir)
if [ ! -e "$libdir/llvmjit.so" ] || [ ! -e "$libdir/auto_explain.so" ]; then
	echo "# jit.sh: this server has no JIT or no auto_explain ($libdir): nothing to check"
	exit 0
fi
test_cluster_start jit \
	"shared_preload_libraries = 'distlock, auto_explain'" \
	"distlock.maintenance_naptime = 0" \
	"auto_explain.log_min_duration = 0" \
	"auto_explain.log_nested_statements = on" \
	"jit = on" \
	"jit_above_cost = 100000"
psql -c "CREATE EXTENSION distlock"

jit_plans() { grep -c '^[[:space:]]*JIT:' "$dir/server.log" || true; }

if [ "$(command psql -X -Atc 'SELECT pg_jit_available()')" != t ]; then
	echo "# jit.sh: this server has no JIT (pg_jit_available() is false): nothing to check"
	exit 0
fi
before=$(jit_plans)
psql -c "SET jit_above_cost = 0" -c "SELECT count(*) FROM pg_class" >/dev/null
control=$(($(jit_plans) - before))
check "a statement of the test's own, with jit_above_cost 0, is compiled, and the log shows it" \
	"$([ "$control" -ge 1 ] && echo yes || echo "no ($control)")" yes

before=$(jit_plans)
psql >/dev/null <<'SQL'
SELECT distlock.session_open('1 hour') AS sid \gset
SELECT distlock.heartbeat(:'sid');
SELECT distlock.try_acquire('a', 'me', '1 min') AS token \gset
SELECT distlock.renew('a', 'me', '1 min');
BEGIN;
SELECT distlock.fence('a', :token);
COMMIT;
SELECT distlock.release('a', 'me');
CALL distlock.acquire('b', 'me', '1 min', :'sid', NULL, '1 s', NULL);
SELECT distlock.enqueue('q', jsonb_build_object('n', i)) FROM generate_series(1, 6) i;
SELECT id AS j1 FROM distlock.claim('q', :'sid') \gset
SELECT distlock.complete(:j1, :'sid');
SELECT array_agg(id) AS js FROM distlock.claim('q', :'sid', 2) \gset
SELECT count(*) FROM distlock.complete_batch(:'js', :'sid');
SELECT id AS j2 FROM distlock.claim('q', :'sid') \gset
SELECT id AS j3 FROM distlock.complete_and_claim(:j2, :'sid') \gset
SELECT distlock.fail(:j3, :'sid', 'no', '0 s');
SELECT array_agg(id) AS js FROM distlock.claim('q', :'sid', 2) \gset
SELECT count(*) FROM distlock.complete_batch_and_claim(:'js', :'sid');
CALL distlock.claim_wait('q', :'sid', 1, '1 s', NULL);
SELECT distlock.enqueue('q', '{}', dedup_key => 'k');
SELECT distlock.cancel((SELECT max(id) FROM distlock.jobs));
SELECT distlock.cancel_jobs('q');
SELECT distlock.throttle('t', '1 s', 2);
SELECT * FROM distlock.throttle_status('t');
SELECT distlock.reap();
SELECT * FROM distlock.maintain();
SELECT count(*) FROM distlock.active_locks;
SELECT count(*) FROM distlock.live_sessions;
SELECT count(*) FROM distlock.queue_stats;
SELECT distlock.session_close(:'sid');
SQL
check "JIT compiled none of distlock's statements in a round of its calls" \
	"$(($(jit_plans) - before))" 0
