#!/bin/bash
# test/scripts/heartbeat_memory.sh -- heartbeats kept in shared memory
# (src/beat.c) write nothing in the steady state, and a crash never ends a
# session before what its heartbeats promised.
#
# With distlock preloaded: after a session's first beat (which writes its
# row ahead), 200 beats leave no row version and no WAL record on
# distlock.sessions; with distlock.heartbeat_persist_ahead = 0 every beat
# writes.  A reap in another database that shares the bound of sessions
# expired in shared memory leaves this database's expired session to its
# claims, which reap it in passing.  Then crashes (immediate shutdown,
# crash recovery at the next start): a session beaten just before keeps at
# least its last promise and at most the margin more, and the next beat
# makes the promise exact again; so does one beaten for longer than that
# margin.
# Last, a beat that wrote its row with synchronous_commit off, followed at
# once by a beat that relies on that row, then a crash: the second beat
# must have written (and flushed) the row, since the first one's record
# may be lost (wal_writer_delay is long here, so it is lost unless flushed).
# Then the same with a synchronous standby: a beat at synchronous_commit =
# on must not rest on a row that a beat at local wrote and the standby has
# not confirmed; it writes, and waits for the standby as any commit does.
set -euo pipefail
. "$(dirname "$0")/common.sh"

test_cluster_start heartbeat-memory \
	"shared_preload_libraries = 'distlock'" \
	"distlock.maintenance_naptime = 0" \
	"wal_writer_delay = 10s" \
	"autovacuum = off"
psql -c "CREATE EXTENSION distlock" -c "CREATE EXTENSION pg_walinspect" >/dev/null

# Over $2 heartbeats of session $1, each its own transaction: how many
# answered true, the row versions of distlock.sessions they updated or
# deleted, and the WAL records they wrote for it.
beats()
{
	local sid=$1 n=$2 lsn upd yes
	lsn=$(psql -At -c "SELECT pg_current_wal_insert_lsn()")
	upd=$(psql -At -c "SELECT n_tup_upd + n_tup_del FROM pg_stat_user_tables WHERE relid = 'distlock.sessions'::regclass")
	yes=$(for _ in $(seq 1 "$n"); do echo "SELECT distlock.heartbeat('$sid');"; done |
		psql -At | grep -c '^t$' || true)
	sleep 0.6	# the backend's counts reach pg_stat_user_tables
	# flush the WAL written so far (wal_writer_delay is long here)
	psql -At -c "CHECKPOINT" >/dev/null
	echo "$yes $(psql -At -c "SELECT (SELECT n_tup_upd + n_tup_del FROM pg_stat_user_tables
							WHERE relid = 'distlock.sessions'::regclass) - $upd,
						(SELECT count(*) FROM pg_get_wal_records_info('$lsn', pg_current_wal_flush_lsn())
						  WHERE block_ref LIKE '%/' || pg_relation_filenode('distlock.sessions') || ' %')" |
		tr '|' ' ')"
}

sid=$(psql -At -c "SELECT distlock.session_open('1 hour', 'w')")
psql -At -c "SELECT distlock.heartbeat('$sid')" >/dev/null
check "200 heartbeats in shared memory: true answers, dead row versions and WAL records of distlock.sessions" \
	"$(beats "$sid" 200)" "200 0 0"
check "the row is ahead of the promise, which live_sessions shows" \
	"$(psql -At -c "SELECT s.expires_at > v.expires_at, v.expires_at - v.heartbeat_at
					  FROM distlock.sessions s JOIN distlock.live_sessions v USING (id)")" \
	"t|01:00:00"

psql -c "ALTER SYSTEM SET distlock.heartbeat_persist_ahead = 0" -c "SELECT pg_reload_conf()" >/dev/null
sleep 0.2
check "with distlock.heartbeat_persist_ahead = 0 every heartbeat writes its row" \
	"$(beats "$sid" 20 | cut -d' ' -f1,2)" "20 20"
check "and the row says the promise exactly" \
	"$(psql -At -c "SELECT s.expires_at = v.expires_at
					  FROM distlock.sessions s JOIN distlock.live_sessions v USING (id)")" t
psql -c "ALTER SYSTEM RESET distlock.heartbeat_persist_ahead" -c "SELECT pg_reload_conf()" >/dev/null
sleep 0.2

# Two databases whose OIDs agree modulo 16 share the bound that tells
# claims a session has expired in shared memory (beat.c).  A reap in one
# must leave the other's expiry in it (at most a second later): here
# nothing else reaps (the worker is off), so the other database's claims
# are all that hand the expired session's job back.
declare -A by_residue
d1= d2=
for i in $(seq 0 16); do
	psql -q -c "CREATE DATABASE beat_db$i"
	oid=$(psql -At -c "SELECT oid::bigint % 16 FROM pg_database WHERE datname = 'beat_db$i'")
	if [ -n "${by_residue[$oid]:-}" ]; then
		d1=${by_residue[$oid]} d2=beat_db$i
		break
	fi
	by_residue[$oid]=beat_db$i
done
for d in $d1 $d2; do psql -q -d "$d" -c "CREATE EXTENSION distlock"; done
read -r dead live < <(psql -d "$d2" -At -F' ' -c "SELECT distlock.session_open('1 second', 'dead'),
														distlock.session_open('1 hour', 'live')")
psql -d "$d2" -At -c "SELECT distlock.heartbeat('$dead')" \
	-c "SELECT distlock.enqueue('q')" -c "SELECT count(*) FROM distlock.claim('q', '$dead')" >/dev/null
sleep 1.5	# its promise has passed, its row (written 3 ttls ahead) has not
psql -d "$d1" -At -c "SELECT distlock.reap()" >/dev/null
sleep 1.2	# the reap puts another database's passed promise 1 s off
check "a reap in a database sharing the bound leaves another's expired session to its claims: they hand its job back" \
	"$(psql -d "$d2" -At -c "SELECT count(*) FROM distlock.claim('q', '$live')" \
		-c "SELECT count(*) FROM distlock.sessions WHERE id = '$dead'" | tr '\n' ' ')" "1 0 "
for i in $(seq 0 16); do psql -q -c "DROP DATABASE IF EXISTS beat_db$i"; done

# A crash after beats kept in shared memory: the session lives on its row,
# at least until its last promise and at most 3 ttls (the margin) after.
sid=$(psql -At -c "SELECT distlock.session_open('2 seconds', 'crash')")
psql -At -c "SELECT distlock.heartbeat('$sid')" >/dev/null	# writes ahead
psql -At -c "SELECT distlock.heartbeat('$sid')" >/dev/null	# writes nothing
promise=$(psql -At -c "SELECT expires_at FROM distlock.live_sessions WHERE id = '$sid'")
cluster_restart immediate
check "after a crash the session is live at least until its last promise, at most 6 s after" \
	"$(psql -At -c "SELECT expires_at >= '$promise' AND expires_at <= '$promise'::timestamptz + interval '6 s'
					  FROM distlock.live_sessions WHERE id = '$sid'")" t
check "its next heartbeat answers true and makes the promise exact again (now + ttl)" \
	"$(psql -At -c "SELECT distlock.heartbeat('$sid')" \
		-c "SELECT expires_at - heartbeat_at, expires_at < '$promise'::timestamptz + interval '6 s'
			  FROM distlock.live_sessions WHERE id = '$sid'" | tr '\n' ' ')" "t 00:00:02|t "

# Beats that go on past the margin the row was written ahead by (3 ttls of
# a 1-s session): a beat whose promise would pass the row writes it ahead
# again, so a crash after 4.5 s of beats still keeps the last promise.
sid=$(psql -At -c "SELECT distlock.session_open('1 second', 'long')")
for _ in $(seq 1 15); do
	psql -At -c "SELECT distlock.heartbeat('$sid')" >/dev/null
	sleep 0.3
done
promise=$(psql -At -c "SELECT expires_at FROM distlock.live_sessions WHERE id = '$sid'")
cluster_restart immediate
# (read from the row, which nothing reaps here: the promise may have
# passed by the time the server is back)
check "beats past the margin the row was written ahead by: after a crash the session's row keeps its last promise" \
	"$(psql -At -c "SELECT count(*) FROM distlock.sessions
					 WHERE id = '$sid' AND expires_at >= '$promise'")" 1

# A beat resting on a row written with synchronous_commit off.
sid=$(psql -At -c "SELECT distlock.session_open('2 seconds', 'async')")
psql -At -c "CHECKPOINT" >/dev/null
psql -At -c "SET synchronous_commit = off" -c "SELECT distlock.heartbeat('$sid')" >/dev/null
psql -At -c "SELECT distlock.heartbeat('$sid')" >/dev/null
promise=$(psql -At -c "SELECT expires_at FROM distlock.live_sessions WHERE id = '$sid'")
cluster_restart immediate
check "a heartbeat does not rely on a row write that is not yet flushed: its promise survives a crash" \
	"$(psql -At -c "SELECT count(*) FROM distlock.live_sessions
					 WHERE id = '$sid' AND expires_at >= '$promise'")" 1

# A synchronous standby that confirms nothing while its walsender is
# stopped (SIGSTOP).  A beat at synchronous_commit = local writes its row
# ahead, which only the primary has; the next beat, at on, must not rest on
# that row, which a failover would lose: it writes, and its commit waits
# for the standby (wait event SyncRep) until the walsender goes on.
walsender=
sync_cleanup()
{
	[ -z "$walsender" ] || kill -CONT "$walsender" 2>/dev/null || true
	stop_standby
}
test_on_exit=sync_cleanup
standby_start
psql -c "ALTER SYSTEM SET synchronous_standby_names = '*'" -c "SELECT pg_reload_conf()" >/dev/null
for _ in $(seq 1 100); do
	[ "$(psql -At -c "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'")" = 1 ] && break
	sleep 0.1
done
sid=$(psql -At -c "SELECT distlock.session_open('1 hour', 'sync')")
psql -At -c "SELECT distlock.heartbeat('$sid')" >/dev/null	# writes ahead
check "with the synchronous standby confirming, heartbeats write nothing" \
	"$(beats "$sid" 5 | cut -d' ' -f1,2)" "5 0"

walsender=$(psql -At -c "SELECT pid FROM pg_stat_replication")
kill -STOP "$walsender"
sid=$(psql -At -c "SET synchronous_commit = local" -c "SELECT distlock.session_open('1 hour', 'local')")
psql -At -c "SET synchronous_commit = local" -c "SELECT distlock.heartbeat('$sid')" >/dev/null
psql -At -c "SELECT distlock.heartbeat('$sid')" >"$dir/beat.out" 2>&1 &
beat=$!
waiting=0
for _ in $(seq 1 50); do
	waiting=$(psql -At -c "SELECT count(*) FROM pg_stat_activity
						   WHERE wait_event = 'SyncRep' AND query LIKE '%heartbeat%'")
	[ "$waiting" = 1 ] && break
	kill -0 "$beat" 2>/dev/null || break
	sleep 0.1
done
check "a heartbeat at synchronous_commit = on over a row the standby has not confirmed waits for the standby" \
	"$waiting" 1
kill -CONT "$walsender"
walsender=
wait "$beat" || true
check "and answers true once the standby confirms" "$(cat "$dir/beat.out")" t
ahead=0
for _ in $(seq 1 50); do	# confirmed as flushed there; wait for replay
	ahead=$(psql -At -p "$sport" -c "SELECT count(*) FROM distlock.sessions
									  WHERE id = '$sid' AND expires_at > now() + interval '1 hour'")
	[ "$ahead" = 1 ] && break
	sleep 0.1
done
check "the standby has the row it wrote, ahead of its promise" "$ahead" 1
