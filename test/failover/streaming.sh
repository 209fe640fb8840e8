#!/bin/bash
# test/failover/streaming.sh -- a primary and a streaming standby, for the
# failover test (test/failover/failover.py drives it).
#
#	streaming.sh start DIR sync|async [postgresql.conf lines...]
#	streaming.sh env DIR		the topology's connection strings
#	streaming.sh lag-pause DIR	SIGSTOP the standby's walreceiver
#	streaming.sh lag-resume DIR	SIGCONT it
#	streaming.sh kill DIR		immediate stop of the primary (SIGQUIT, by PID)
#	streaming.sh promote DIR	promote the standby; returns once it writes
#	streaming.sh open DIR		let clients connect to the promoted standby
#	streaming.sh switchpoint DIR	"TLI LSN": where the new timeline began
#	streaming.sh old-primary DIR	start the old primary's data directory
#					alone; prints its connection string
#	streaming.sh stop DIR		stop every server started here, by PID
#
# This file is the topology's whole interface: another HA setup (say
# pg_auto_failover) plugs in as another script with the same subcommands.
# "env" prints KEY=VALUE lines: MODE (sync or async); CLIENT_DSN, the libpq
# multi-host string the clients use (TCP, target_session_attrs=read-write);
# ADMIN_DSN, the harness's own (Unix sockets, same order of nodes); both
# without dbname.
#
# The gate: the standby's pg_hba.conf rejects every TCP connection but
# replication until "open", so that after a promotion no client writes
# before the harness has created the logical slot that records the new
# primary's side of the history (a PostgreSQL 15 standby cannot have one).
# The harness itself comes in over the Unix socket.
#
# sync: the primary waits for the standby's flush at every commit
# (synchronous_standby_names = '*', synchronous_commit = on).  It is set
# with ALTER SYSTEM after the base backup, so the standby's copy of
# postgresql.auto.conf does not have it: promoted, it must not wait for a
# standby it does not have.  async: no such wait; acknowledged commits the
# standby had not received are lost at a failover.
set -euo pipefail
usage_end=15
. "$(dirname "$0")/topology.sh"
# what "start" wrote: MODE, PRIMARY, STANDBY, the ports P1 and P2, the DSNs
# shellcheck source=/dev/null
[ ! -f "$state" ] || . "$state"

case $cmd in
start)
	mode=${1:?sync or async}
	shift
	mkdir -p "$dir"
	chmod 755 "$dir"
	cluster_start "$dir/primary" "track_commit_timestamp = on" \
		"wal_level = logical" "max_replication_slots = 8" \
		"max_wal_senders = 8" "hot_standby = on" \
		"shared_preload_libraries = 'pg_stat_statements'" \
		"pg_stat_statements.track = all" "$@" || exit 1
	p1=$PGPORT
	s1=$dir/primary
	mkdir -p "$dir/standby"
	[ "$(id -u)" -eq 0 ] && chown postgres: "$dir/standby"
	# a physical slot keeps the WAL the standby has not received yet
	as_owner "$PG_BINDIR/pg_basebackup" -h "$s1" -p "$p1" -U postgres \
		-D "$dir/standby/data" -R -X stream -C -S standby \
		>"$dir/standby/basebackup.log" 2>&1 || {
		cat "$dir/standby/basebackup.log" >&2
		exit 1
	}
	p2=$(free_port)
	s2=$dir/standby
	{
		echo "port = $p2"
		echo "unix_socket_directories = '$s2'"
	} | as_owner tee -a "$dir/standby/data/postgresql.conf" >/dev/null
	# the gate (see above)
	printf '%s\n' "local all all trust" "local replication all trust" \
		"host replication all 127.0.0.1/32 trust" \
		"host all all 127.0.0.1/32 reject" |
		as_owner tee "$dir/standby/data/pg_hba.conf" >/dev/null
	as_owner "$PG_BINDIR/pg_ctl" -D "$dir/standby/data" -w -t 60 \
		-l "$dir/standby/server.log" start >/dev/null || {
		cat "$dir/standby/server.log" >&2
		exit 1
	}
	for _ in $(seq 1 200); do
		[ "$(on_node "$s1" "$p1" -c "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")" = 1 ] && break
		sleep 0.05
	done
	if [ "$mode" = sync ]; then
		on_node "$s1" "$p1" -c "ALTER SYSTEM SET synchronous_standby_names = '*'" \
			-c "SELECT pg_reload_conf()" >/dev/null
		for _ in $(seq 1 200); do
			[ "$(on_node "$s1" "$p1" -c "SELECT sync_state FROM pg_stat_replication")" = sync ] && break
			sleep 0.05
		done
	fi
	got=$(on_node "$s1" "$p1" -c "SELECT state || ' ' || sync_state FROM pg_stat_replication")
	want="streaming $([ "$mode" = sync ] && echo sync || echo async)"
	[ "$got" = "$want" ] || {
		echo "replication is '$got', expected '$want'" >&2
		exit 1
	}
	cat >"$state" <<EOF
MODE=$mode
PRIMARY=$dir/primary
STANDBY=$dir/standby
CLIENT_DSN='host=127.0.0.1,127.0.0.1 port=$p1,$p2 target_session_attrs=read-write'
ADMIN_DSN='host=$s1,$s2 port=$p1,$p2 target_session_attrs=read-write'
P1=$p1
P2=$p2
EOF
	;;
env)
	grep -E '^(MODE|CLIENT_DSN|ADMIN_DSN)=' "$state" | tr -d "'"
	;;
lag-pause | lag-resume)
	walreceiver_signal "$STANDBY" "$P2"
	;;
kill)
	node_stop "$PRIMARY/data" QUIT
	;;
promote)
	# a paused walreceiver would hold the promotion up
	pid=$(pgrep -f "postgres: walreceiver" -P "$(node_pid "$STANDBY/data")" || true)
	[ -z "$pid" ] || kill -CONT "$pid"
	as_owner "$PG_BINDIR/pg_ctl" -D "$STANDBY/data" -w -t 60 promote >/dev/null
	[ "$(on_node "$STANDBY" "$P2" -c "SELECT NOT pg_is_in_recovery() AND current_setting('synchronous_standby_names') = ''")" = t ] || {
		echo "the promoted standby is in recovery or waits for a standby" >&2
		exit 1
	}
	;;
open)
	printf '%s\n' "local all all trust" "host all all 127.0.0.1/32 trust" |
		as_owner tee "$STANDBY/data/pg_hba.conf" >/dev/null
	on_node "$STANDBY" "$P2" -c "SELECT pg_reload_conf()" >/dev/null
	;;
switchpoint)
	switchpoint "$STANDBY/data"
	;;
old-primary)
	start_alone "$PRIMARY/data" "$PRIMARY"
	;;
stop)
	for d in "$dir/primary/data" "$dir/standby/data"; do
		node_stop "$d" TERM
	done
	;;
*)
	echo "unknown subcommand $cmd" >&2
	exit 2
	;;
esac
