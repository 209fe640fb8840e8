#!/bin/bash
# test/scripts/dump_restore.sh -- pg_dump / pg_restore keeps distlock's state.
#
# Fills a database with jobs in every status, held leases, sessions and a
# token counter near 10^6, dumps it with pg_dump -Fc, restores it into a
# fresh database, and checks that every row survives, that the next fencing
# token is larger than every token issued before the dump, that job ids go
# on from where they were, and that restored leases and sessions still hold.
set -euo pipefail
. "$(dirname "$0")/common.sh"
test_cluster_start dump

psql -c "CREATE DATABASE src" -c "CREATE DATABASE dst"
psql -d src <<'SQL' >/dev/null
CREATE EXTENSION distlock;
SELECT setval('distlock.token_seq', 1000000);
CREATE TABLE sess AS SELECT distlock.session_open('1 hour', 'dumped') AS id;
SELECT distlock.try_acquire('lock-' || i, 'owner-' || i, '1 hour') FROM generate_series(1, 40) i;
SELECT distlock.try_acquire('bound-' || i, 'w', NULL, (SELECT id FROM sess)) FROM generate_series(1, 10) i;
SELECT distlock.enqueue('q' || (i % 3), jsonb_build_object('i', i), priority => i % 5,
						dedup_key => CASE WHEN i % 10 = 0 THEN 'k' || i END)
  FROM generate_series(1, 1000) i;
SELECT count(*) FROM distlock.claim('q0', (SELECT id FROM sess), 100);
SELECT distlock.complete(id, (SELECT id FROM sess)) FROM distlock.jobs
 WHERE status = 'running' ORDER BY id LIMIT 50;
SELECT distlock.cancel(id) FROM distlock.jobs WHERE queue = 'q1' ORDER BY id LIMIT 20;
SQL

# a digest of every distlock row, and the counters
digest="SELECT md5(string_agg(x, ',' ORDER BY x)) FROM (
	SELECT l::text FROM distlock.locks l UNION ALL
	SELECT s::text FROM distlock.sessions s UNION ALL
	SELECT j::text FROM distlock.jobs j) t(x)"
before=$(psql -At -d src -c "$digest")
max_token=$(psql -At -d src -c "SELECT max(token) FROM distlock.locks")
max_job=$(psql -At -d src -c "SELECT max(id) FROM distlock.jobs")
counts="SELECT (SELECT count(*) FROM distlock.locks) || '/' || (SELECT count(*) FROM distlock.sessions) || '/' || (SELECT count(*) FROM distlock.jobs)"
counts_before=$(psql -At -d src -c "$counts")

as_owner "$PG_BINDIR/pg_dump" -h "$PGHOST" -p "$PGPORT" -U postgres -Fc -f "$dir/src.dump" src
as_owner "$PG_BINDIR/pg_restore" -h "$PGHOST" -p "$PGPORT" -U postgres -d dst "$dir/src.dump"

check "every row restored ($counts_before locks/sessions/jobs)" "$(psql -At -d dst -c "$counts")" "$counts_before"
check "restored rows identical" "$(psql -At -d dst -c "$digest")" "$before"
check "next token larger than every token before the dump" \
	"$(psql -At -d dst -c "SELECT distlock.try_acquire('new lock', 'w') > $max_token")" t
check "a taken-over lease gets a larger token" \
	"$(psql -At -d dst -c "SELECT distlock.release('lock-1', 'owner-1'), distlock.try_acquire('lock-1', 'x') > $max_token")" "t|t"
check "job ids continue" \
	"$(psql -At -d dst -c "SELECT distlock.enqueue('q0') > $max_job")" t
check "restored leases still held" \
	"$(psql -At -d dst -c "SELECT count(*) FROM distlock.active_locks WHERE name LIKE 'lock-%' OR name LIKE 'bound-%'")" 50
check "restored session live, its claims acknowledgeable" \
	"$(psql -At -d dst -c "SELECT distlock.heartbeat(id), distlock.complete((SELECT min(j.id) FROM distlock.jobs j WHERE j.status = 'running'), id) FROM sess")" "t|t"
check "dedup keys still enforced" \
	"$(psql -At -d dst -c "SELECT distlock.enqueue(queue, dedup_key => dedup_key) = id FROM distlock.jobs
		WHERE status = 'pending' AND dedup_key IS NOT NULL ORDER BY id LIMIT 1")" t
acls="SELECT string_agg(c.relname || ':' || coalesce(c.relacl::text, '-'), ' ' ORDER BY c.relname)
	FROM pg_class c WHERE c.relnamespace = 'distlock'::regnamespace"
check "privileges restored" "$(psql -At -d dst -c "$acls")" "$(psql -At -d src -c "$acls")"
check "the token epoch's row came along; restored into this cluster, no rebase: rows naming it, base 0" \
	"$(psql -At -d dst -c "SELECT count(*), max(base), bool_and(e.system_identifier = c.system_identifier)
		FROM distlock.token_epoch e, pg_control_system() c")" "2|0|t"
