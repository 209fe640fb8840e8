#!/bin/bash
# test/scripts/standby.sh -- on a hot standby every call that writes fails
# with 25006 and a clear message, and the views still read.
set -euo pipefail
. "$(dirname "$0")/common.sh"

test_on_exit=stop_standby
test_cluster_start standby "wal_level = replica" "max_wal_senders = 4"

psql -c "CREATE EXTENSION distlock"
sid=$(psql -At -c "SELECT distlock.session_open('1 hour')")
psql -c "SELECT distlock.try_acquire('L', 'w', '1 hour')" -c "SELECT distlock.enqueue('q')" >/dev/null

standby_start

on_standby() { psql -At -p "$sport" "$@"; }
for _ in $(seq 1 100); do
	[ "$(on_standby -c "SELECT count(*) FROM distlock.active_locks" 2>/dev/null)" = 1 ] && break
	sleep 0.1
done
check "the standby is in recovery and has the primary's lock" \
	"$(on_standby -c "SELECT pg_is_in_recovery(), (SELECT count(*) FROM distlock.active_locks)")" "t|1"

refused=0
total=0
while IFS= read -r call; do
	total=$((total + 1))
	out=$(on_standby -v VERBOSITY=verbose -c "SELECT $call" 2>&1 || true)
	if grep -q "25006" <<<"$out" && grep -q "read-only transaction" <<<"$out"; then
		refused=$((refused + 1))
	else
		echo "# $call: $out"
	fi
done <<EOF2
distlock.try_acquire('L2', 'w')
distlock.renew('L', 'w')
distlock.release('L', 'w')
distlock.fence('L', 1)
distlock.session_open()
distlock.heartbeat('$sid')
distlock.session_close('$sid')
distlock.reap()
distlock.enqueue('q')
distlock.claim('q', '$sid')
distlock.complete(1, '$sid')
distlock.fail(1, '$sid')
distlock.cancel(1)
distlock.throttle('t', '1 second')
EOF2
check "every writing call fails on the standby with 25006 ($refused of $total)" "$refused" "$total"
check "the views and read-only functions still work there" \
	"$(on_standby -c "SELECT (SELECT count(*) FROM distlock.live_sessions), (SELECT count(*) FROM distlock.queue_stats), distlock.lock_key('x') IS NOT NULL")" "1|1|t"

# Failover with asynchronous replication: the promoted standby hands out no
# token a client of the old primary already holds, even for grants it never
# received.  The primary's walsender is stopped, so the grants below stay
# on the primary alone (stopping the walreceiver would not do: what was in
# the socket before the primary died would still arrive).
multi="host=127.0.0.1,127.0.0.1 port=$sport,$PGPORT dbname=postgres user=postgres"
check "a read-write multi-host connection skips the standby" \
	"$(psql -At "$multi target_session_attrs=read-write" -c "SELECT pg_is_in_recovery()")" f
walsender=$(psql -At -c "SELECT pid FROM pg_stat_replication")
for _ in $(seq 1 100); do
	[ "$(psql -At -c "SELECT pg_current_wal_lsn() = replay_lsn FROM pg_stat_replication")" = t ] && break
	sleep 0.1
done
kill -STOP "$walsender"
last=0
for i in $(seq 1 10); do
	last=$(psql -At -c "SELECT distlock.try_acquire('lost-$i', 'w')")
done
# kill the primary outright: SIGKILL reaches the stopped walsender too
pkill -KILL -P "$CLUSTER_PID" || true
kill -KILL "$CLUSTER_PID"
CLUSTER_PID=
as_owner "$PG_BINDIR/pg_ctl" -D "$dir/standby/data" -w -t 60 promote >/dev/null
kept=$(on_standby -c "SELECT count(*) FROM distlock.locks WHERE name LIKE 'lost-%'")
check "the standby never received the last grants (kept $kept of 10)" "$kept" 0
after=$(psql -At "$multi target_session_attrs=read-write" -c "SELECT distlock.try_acquire('after', 'w')")
check "the first token after promotion exceeds every token before it ($after > $last)" \
	"$([ "$after" -gt "$last" ] && echo yes || echo no)" yes
check "it is in the new timeline's epoch (timeline 2: 2^40 + 1)" "$after" $((1 << 40 | 1))
check "the promoted standby grants the lost names anew, above the lost tokens" \
	"$(on_standby -c "SELECT bool_and(distlock.try_acquire('lost-' || i, 'x') > $last) FROM generate_series(1, 10) i")" t
