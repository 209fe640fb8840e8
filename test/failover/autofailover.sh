#!/bin/bash
# test/failover/autofailover.sh -- pg_auto_failover (a monitor and two
# nodes, each run by its pg_autoctl keeper) for the failover test; the same
# subcommands as streaming.sh, which documents them.
#
#	autofailover.sh start DIR sync|async [postgresql.conf lines...]
#	autofailover.sh env|lag-pause|lag-resume|kill|promote|open|switchpoint|
#		old-primary|stop DIR
#
# PAF_FAILOVER (at start) picks the failover: "kill" (default) kills the
# primary's node, keeper and postgres (SIGKILL of the keeper's process group
# and of the postmaster), and the monitor promotes the standby once its
# health checks fail; "perform" runs pg_autoctl perform failover, the
# manager's own switchover, and the old primary follows the new one (it is
# rewound, and its keeper drops its replication slots: see old-primary).
#
# pg_auto_failover replicates synchronously by default (the primary's
# synchronous_standby_names is 'ANY 1 (...)' while the standby is in the
# replication quorum): that is "sync".  "async" takes the standby out of
# the quorum (pg_autoctl set node replication-quorum false).  The monitor's
# health checks run every second here and a node counts as down after 2 s,
# and the monitor waits 3 s for a lost primary to demote itself (the
# defaults: 5 s, 20 s and 30 s), so that a failover takes seconds.
#
# The nodes' pg_hba.conf is ours (--skip-pg-hba): everything on loopback is
# trusted, but the standby refuses the clients' role over TCP until "open",
# the gate of streaming.sh (pg_autoctl's own roles and replication pass).
# Sockets are in DIR/sock; pg_autoctl's configuration and state in DIR too.
set -euo pipefail
usage_end=7
. "$(dirname "$0")/topology.sh"

# pg_autoctl as the cluster's owner, with its files under $dir.
paf_env=(env XDG_CONFIG_HOME="$dir/xdg/config" XDG_DATA_HOME="$dir/xdg/data"
	XDG_RUNTIME_DIR="$dir/xdg/run" PGHOST="$dir/sock"
	PATH="$PG_BINDIR:/usr/bin:/bin")
paf()
{
	as_owner "${paf_env[@]}" pg_autoctl "$@"
}

# Start "pg_autoctl run" for data directory $1 in a session of its own, so
# that its process group is the whole node (keeper and postgres).
paf_run()
{
	as_owner "${paf_env[@]}" setsid pg_autoctl run --pgdata "$1" \
		>"$1.log" 2>&1 </dev/null &
}

# The process group of the node of data directory $1 (its keeper's).
group_of()
{
	local pid
	pid=$(pgrep -f -x "pg_autoctl run --pgdata $1" | head -1) || return 0
	ps -o pgid= -p "$pid" | tr -d ' '
}

# Wait up to $1 seconds for psql-args... (after the port) to print "t".
wait_for()
{
	local secs=$1
	shift
	for _ in $(seq 1 $((secs * 10))); do
		[ "$(on_node "$dir/sock" "$@" 2>/dev/null)" = t ] && return 0
		sleep 0.1
	done
	echo "timed out waiting for: ${*: -1}" >&2
	return 1
}

# Stop process group $1 (a keeper's): TERM, then KILL after 10 s.
group_stop()
{
	local g=$1
	[ -n "$g" ] || return 0
	kill -TERM -- "-$g" 2>/dev/null || return 0
	for _ in $(seq 1 100); do
		kill -0 -- "-$g" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -KILL -- "-$g" 2>/dev/null || true
}

# The standby's pg_hba.conf: $1 = gated or open.
hba()
{
	{
		echo "local all all trust"
		echo "local replication all trust"
		echo "host replication all 127.0.0.1/32 trust"
		[ "$1" = gated ] && echo "host all postgres 127.0.0.1/32 reject"
		echo "host all all 127.0.0.1/32 trust"
	} | as_owner tee "$2/pg_hba.conf" >/dev/null
}

case $cmd in
start)
	mode=${1:?sync or async}
	shift
	ext=$("$PG_CONFIG" --sharedir)/extension/pgautofailover.control
	command -v pg_autoctl >/dev/null && [ -f "$ext" ] || {
		echo "pg_auto_failover is not installed for this server ($ext)" >&2
		exit 77
	}
	mkdir -p "$dir/sock" "$dir/xdg/run"
	chmod 755 "$dir"
	[ "$(id -u)" -eq 0 ] && chown -R postgres: "$dir"
	mport=$(free_port)
	p1=$(free_port)
	p2=$(free_port)
	monitor="postgres://autoctl_node@127.0.0.1:$mport/pg_auto_failover?sslmode=disable"
	for n in monitor node1; do
		as_owner "$PG_BINDIR/initdb" -D "$dir/$n" -U postgres -A trust \
			--no-locale -E UTF8 >"$dir/$n-initdb.log" 2>&1
		{
			echo "unix_socket_directories = '$dir/sock'"
			echo "shared_buffers = 128MB"
		} | as_owner tee -a "$dir/$n/postgresql.conf" >/dev/null
	done
	{
		echo "pgautofailover.health_check_period = 1000"
		echo "pgautofailover.health_check_timeout = 1000"
		echo "pgautofailover.health_check_retry_delay = 500"
		echo "pgautofailover.node_considered_unhealthy_timeout = 2000"
		echo "pgautofailover.primary_demote_timeout = 3000"
	} | as_owner tee -a "$dir/monitor/postgresql.conf" >/dev/null
	# what the harness needs, after pg_auto_failover's includes (node2
	# gets it with node1's base backup)
	{
		echo "track_commit_timestamp = on"
		echo "wal_level = logical"
		echo "pg_stat_statements.track = all"
		for line in "$@"; do echo "$line"; done
	} | as_owner tee -a "$dir/node1/postgresql.conf" >/dev/null
	hba open "$dir/node1"

	paf create monitor --pgdata "$dir/monitor" --pgport "$mport" \
		--hostname 127.0.0.1 --auth trust --no-ssl >"$dir/monitor-create.log" 2>&1
	paf_run "$dir/monitor"
	wait_for 30 "$mport" -d pg_auto_failover -c "SELECT true"
	paf create postgres --pgdata "$dir/node1" --pgport "$p1" --name node1 \
		--hostname 127.0.0.1 --no-ssl --skip-pg-hba --monitor "$monitor" \
		>"$dir/node1-create.log" 2>&1
	paf_run "$dir/node1"
	wait_for 60 "$mport" -d pg_auto_failover -c \
		"SELECT reportedstate = 'single' FROM pgautofailover.node WHERE nodename = 'node1'"
	paf create postgres --pgdata "$dir/node2" --pgport "$p2" --name node2 \
		--hostname 127.0.0.1 --no-ssl --skip-pg-hba --monitor "$monitor" \
		>"$dir/node2-create.log" 2>&1
	hba gated "$dir/node2"
	paf_run "$dir/node2"
	wait_for 60 "$mport" -d pg_auto_failover -c \
		"SELECT bool_and(reportedstate = goalstate) AND count(*) FILTER (WHERE reportedstate = 'secondary') = 1 FROM pgautofailover.node"
	if [ "$mode" = async ]; then
		paf set node replication-quorum false --pgdata "$dir/node2" \
			>"$dir/quorum.log" 2>&1
	fi
	want=$([ "$mode" = sync ] && echo sync || echo async)
	wait_for 30 "$p1" -c \
		"SELECT state = 'streaming' AND sync_state IN ('$want', 'quorum') FROM pg_stat_replication"
	cat >"$state" <<EOF
MODE=$mode
FAILOVER=${PAF_FAILOVER:-kill}
PRIMARY=$dir/node1
STANDBY=$dir/node2
MONITOR=$dir/monitor
P1=$p1
P2=$p2
CLIENT_DSN='host=127.0.0.1,127.0.0.1 port=$p1,$p2 target_session_attrs=read-write'
ADMIN_DSN='host=$dir/sock,$dir/sock port=$p1,$p2 target_session_attrs=read-write'
EOF
	;;
env)
	grep -E '^(MODE|CLIENT_DSN|ADMIN_DSN)=' "$state" | tr -d "'"
	;;
lag-pause | lag-resume)
	. "$state"
	walreceiver_signal "$dir/sock" "$P2"
	;;
kill)
	. "$state"
	if [ "$FAILOVER" = perform ]; then
		# The old primary's keeper drops its slots when it follows the new
		# primary: keep the harness's slot (only peeked, so its state on
		# disk is still the one it was created with) for old-primary.
		if [ -d "$PRIMARY/pg_replslot/fault" ]; then
			rm -rf "$dir/saved-slot"
			cp -a "$PRIMARY/pg_replslot/fault" "$dir/saved-slot"
		fi
		paf perform failover --pgdata "$MONITOR" >"$dir/perform.log" 2>&1
	else
		pm=$(node_pid "$PRIMARY")
		g=$(group_of "$PRIMARY")
		[ -z "$g" ] || kill -KILL -- "-$g" 2>/dev/null || true
		if [ -n "$pm" ]; then
			pkill -KILL -P "$pm" || true
			kill -KILL "$pm" 2>/dev/null || true
		fi
	fi
	;;
promote)
	. "$state"
	# a paused walreceiver would hold the promotion up
	pid=$(on_node "$dir/sock" "$P2" -c "SELECT pid FROM pg_stat_wal_receiver" 2>/dev/null || true)
	[ -z "$pid" ] || kill -CONT "$pid"
	wait_for 120 "$P2" -c \
		"SELECT NOT pg_is_in_recovery() AND NOT current_setting('transaction_read_only')::boolean"
	;;
open)
	. "$state"
	# both: pg_rewind copies the configuration files of the node it
	# rewinds from, so an old primary that followed the gated standby has
	# its gate (and libpq tries no further host after a rejection)
	hba open "$STANDBY"
	on_node "$dir/sock" "$P2" -c "SELECT pg_reload_conf()" >/dev/null
	if [ -n "$(node_pid "$PRIMARY")" ]; then
		hba open "$PRIMARY"
		on_node "$dir/sock" "$P1" -c "SELECT pg_reload_conf()" >/dev/null
	fi
	;;
switchpoint)
	. "$state"
	switchpoint "$STANDBY"
	;;
old-primary)
	. "$state"
	if [ "$FAILOVER" = perform ]; then
		# It follows the new primary now.  Stopped, with its slot put back
		# and no standby.signal, it starts as a primary on the timeline it
		# follows, its old history still in pg_wal (pg_auto_failover keeps
		# wal_keep_size = 8 GB) for the slot to decode up to the switchpoint.
		group_stop "$(group_of "$PRIMARY")"
		pm=$(node_pid "$PRIMARY")
		if [ -n "$pm" ]; then
			kill -TERM "$pm"
			while kill -0 "$pm" 2>/dev/null; do sleep 0.1; done
		fi
		rm -f "$PRIMARY/standby.signal"
		rm -rf "$PRIMARY/pg_replslot/fault"
		cp -a "$dir/saved-slot" "$PRIMARY/pg_replslot/fault"
	fi
	# alone, as streaming.sh does it: its keeper is stopped
	mkdir -p "$dir/alone"
	[ "$(id -u)" -eq 0 ] && chown postgres: "$dir/alone"
	start_alone "$PRIMARY" "$dir/alone"
	;;
stop)
	[ -f "$state" ] || exit 0
	. "$state"
	for d in "$PRIMARY" "$STANDBY" "$MONITOR"; do
		group_stop "$(group_of "$d")"
	done
	for d in "$PRIMARY" "$STANDBY" "$MONITOR"; do
		pm=$(node_pid "$d")
		[ -z "$pm" ] || kill -TERM "$pm" 2>/dev/null || true
	done
	for _ in $(seq 1 100); do
		[ -z "$(node_pid "$PRIMARY")$(node_pid "$STANDBY")$(node_pid "$MONITOR")" ] && break
		sleep 0.1
	done
	;;
*)
	echo "unknown subcommand $cmd" >&2
	exit 2
	;;
esac
