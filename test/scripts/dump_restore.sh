#!/bin/bash
# test/scripts/dump_restore.sh -- pg_dump / pg_restore keeps distlock's state.
#
# Fills a database with jobs in every status, held leases, sessions and a
# token counter near 10^6, dumps it with pg_dump -Fc, restores it into a
# fresh database, and checks that every row survives, that the next fencing
# token is larger than every token issued before the dump, that job ids go
# on from where they were, and that restored leases and sessions still hold.
# Then the same as the owner of a trusted install who is not a superuser:
# its own dump restored by itself, and a superuser's dump restored by it.
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

# The owner of a trusted install, not a superuser, backs it up and restores
# it, and restores a superuser's dump (pg_dump and pg_restore as that role).
psql -c "CREATE ROLE dbo LOGIN" -c "CREATE DATABASE osrc OWNER dbo" \
	-c "CREATE DATABASE odst OWNER dbo" -c "CREATE DATABASE odst2 OWNER dbo"
command psql -X -q -v ON_ERROR_STOP=1 -U dbo -d osrc <<'SQL' >/dev/null
CREATE EXTENSION distlock;
CREATE TABLE sess AS SELECT distlock.session_open('1 hour', 'dumped') AS id;
SELECT distlock.try_acquire('lock-' || i, 'owner-' || i, '1 hour') FROM generate_series(1, 20) i;
SELECT distlock.enqueue('q', jsonb_build_object('i', i)) FROM generate_series(1, 100) i;
SELECT count(*) FROM distlock.claim('q', (SELECT id FROM sess), 10);
SELECT distlock.throttle('t', '1 hour');
SQL
odigest="$digest UNION ALL SELECT md5(string_agg(t::text, ',' ORDER BY t::text)) FROM distlock.throttles t"
obefore=$(psql -At -d osrc -c "$odigest")
omax_token=$(psql -At -d osrc -c "SELECT max(token) FROM distlock.locks")
omax_job=$(psql -At -d osrc -c "SELECT max(id) FROM distlock.jobs")
ocounts_before=$(psql -At -d osrc -c "$counts")
as_owner "$PG_BINDIR/pg_dump" -h "$PGHOST" -p "$PGPORT" -U dbo -Fc -f "$dir/osrc.dump" osrc \
	2>"$dir/odump.err" || true
check "the owner dumps its trusted install" "$(cat "$dir/odump.err")" ""
as_owner "$PG_BINDIR/pg_restore" -h "$PGHOST" -p "$PGPORT" -U dbo -d odst "$dir/osrc.dump" \
	2>"$dir/orestore.err" || true
check "the owner restores it without errors" "$(cat "$dir/orestore.err")" ""
check "every row restored by the owner ($ocounts_before locks/sessions/jobs)" \
	"$(psql -At -d odst -c "$counts")" "$ocounts_before"
check "rows restored by the owner identical" "$(psql -At -d odst -c "$odigest")" "$obefore"
check "after the owner's restore, the next token is above every token before the dump" \
	"$(command psql -X -At -U dbo -d odst -c "SELECT distlock.try_acquire('new lock', 'w') > $omax_token")" t
check "after the owner's restore, job ids continue" \
	"$(command psql -X -At -U dbo -d odst -c "SELECT distlock.enqueue('q') > $omax_job")" t
check "the owner still cannot change or remove rows directly" \
	"$(command psql -X -At -U dbo -d odst -c "SELECT has_table_privilege('distlock.jobs', 'UPDATE'),
		has_table_privilege('distlock.jobs', 'DELETE'), has_table_privilege('distlock.jobs', 'TRUNCATE')")" "f|f|f"

as_owner "$PG_BINDIR/pg_restore" -h "$PGHOST" -p "$PGPORT" -U dbo --no-owner -d odst2 "$dir/src.dump" \
	2>"$dir/orestore2.err" || true
check "the owner restores a superuser's dump without errors" "$(cat "$dir/orestore2.err")" ""
check "every row of the superuser's dump restored by the owner" \
	"$(psql -At -d odst2 -c "$counts")" "$counts_before"
check "rows of the superuser's dump restored by the owner identical" \
	"$(psql -At -d odst2 -c "$digest")" "$before"
check "after that restore too, the next token is above every token before the dump" \
	"$(command psql -X -At -U dbo -d odst2 -c "SELECT distlock.try_acquire('new lock', 'w') > $max_token")" t

# A superuser restores a dump that names roles the target does not have:
# their rows are kept, as rows of no role, for an administrator, even
# where two such roles had the same throttle name, dedup key or grant
# (which, both of no role now, must not collide), and their limits do not
# become everyone's defaults.
psql -c "CREATE ROLE gone" -c "CREATE ROLE gone2" -c "CREATE DATABASE msrc" -c "CREATE DATABASE mdst" >/dev/null
psql -d msrc <<'SQL' >/dev/null
CREATE EXTENSION distlock;
GRANT USAGE ON SCHEMA distlock TO gone, gone2;
SELECT distlock.try_acquire('mine-' || i, 'me', '1 hour') FROM generate_series(1, 5) i;
SQL
for r in gone gone2; do
	psql -d msrc -v r="$r" <<'SQL' >/dev/null
SELECT distlock.set_limit('sessions', 7, :'r');
SET ROLE :r;
SELECT distlock.try_acquire(:'r' || '-' || i, 'g', '1 hour') FROM generate_series(1, 3) i;
SELECT distlock.session_open('1 hour', 'g');
SELECT distlock.enqueue('gq', '{}') FROM generate_series(1, 3) i;
SELECT distlock.enqueue('gq', '{}', dedup_key => 'k');
SELECT distlock.throttle('gt', '1 hour');
SELECT distlock.grant_queue('gq', 'claim', 'postgres');
RESET ROLE;
SELECT distlock.grant_queue('pq', 'claim', :'r');
SQL
done
mcounts_sql="SELECT (SELECT count(*) FROM distlock.locks) || '/' || (SELECT count(*) FROM distlock.sessions)
	|| '/' || (SELECT count(*) FROM distlock.jobs) || '/' || (SELECT count(*) FROM distlock.throttles)
	|| '/' || (SELECT count(*) FROM distlock.queue_grants) || '/' || (SELECT count(*) FROM distlock.limits)"
mcounts=$(psql -At -d msrc -c "$mcounts_sql")
as_owner "$PG_BINDIR/pg_dump" -h "$PGHOST" -p "$PGPORT" -U postgres -Fc -f "$dir/msrc.dump" msrc
psql -d msrc -c "REVOKE USAGE ON SCHEMA distlock FROM gone, gone2" -c "DROP ROLE gone, gone2" >/dev/null
as_owner "$PG_BINDIR/pg_restore" -h "$PGHOST" -p "$PGPORT" -U postgres -d mdst "$dir/msrc.dump" \
	2>"$dir/mrestore.err" || true
check "a restore naming missing roles keeps every row ($mcounts locks/sessions/jobs/throttles/grants/limits)" \
	"$(psql -At -d mdst -c "$mcounts_sql")" "$mcounts"
check "... failing nothing but the GRANT to those roles (no table's COPY)" \
	"$(grep 'Command was:' "$dir/mrestore.err" | grep -vc 'GRANT USAGE ON SCHEMA distlock TO gone' || true)" 0
check "the missing roles' rows belong to no role" \
	"$(psql -At -d mdst -c "SELECT (SELECT count(*) FROM distlock.locks WHERE created_by = 0) || '/' ||
		(SELECT count(*) FROM distlock.sessions WHERE created_by = 0) || '/' ||
		(SELECT count(*) FROM distlock.jobs WHERE created_by = 0 AND queue_owner = 0) || '/' ||
		(SELECT count(*) FROM distlock.throttles WHERE owner = 0 AND created_by::text = '-') || '/' ||
		(SELECT count(*) FROM distlock.queue_grants WHERE owner = 0)")" "6/2/8/2/2"
check "... and the grants to them, of one queue, are grants to no role" \
	"$(psql -At -d mdst -c "SELECT count(*) FROM distlock.queue_grants WHERE queue = 'pq' AND grantee = 0")" 2
check "... their limits limit nobody: they are not the defaults row" \
	"$(psql -At -d mdst -c "SELECT (SELECT count(*) FROM distlock.limits WHERE role = 0) || '/' ||
		(SELECT count(*) FROM distlock.limits WHERE role IS NULL)")" "2/0"
check "an administrator gives them to a role, one of each name, key and grant" \
	"$(psql -At -d mdst -c "SELECT sessions || '/' || locks || '/' || jobs || '/' || throttles
		|| '/' || queue_grants FROM distlock.reassign_owned('-', 'postgres')")" "2/6/7/1/1"
check "the rows of a dropped role dump as rows of no role, never as its OID" \
	"$(psql -At -d msrc -c "SELECT string_agg(DISTINCT created_by::text, ',') FROM distlock.locks WHERE name LIKE 'gone-%'")" "-"
