# test/failover/topology.sh -- what the topology scripts (streaming.sh,
# autofailover.sh) share.  Sourced with their arguments, after
# "set -euo pipefail": takes the subcommand and the directory off them
# ($cmd, $dir; $state is the topology's KEY=VALUE file), printing lines
# 3 to $usage_end of the script as usage if either is missing.

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$top/test/cluster.sh"

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || {
	sed -n "3,${usage_end}p" "$0" >&2
	exit 2
}
shift 2
state=$dir/topology.env

# The postmaster PID of data directory $1, if it runs.
node_pid()
{
	local pid
	pid=$(head -1 "$1/postmaster.pid" 2>/dev/null) || return 0
	[ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = postgres ] &&
		echo "$pid"
	return 0
}

# Whether process $1 runs.  A zombie does not: the postmaster's parent is
# init, which may take its time to reap it.
running()
{
	local st
	st=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) && [ "$st" != Z ]
}

# Stop the postmaster of data directory $1 by its PID ($2: TERM or QUIT).
node_stop()
{
	local pid
	pid=$(node_pid "$1")
	[ -n "$pid" ] || return 0
	kill "-${2:-TERM}" "$pid" 2>/dev/null || true
	for _ in $(seq 1 600); do
		running "$pid" || return 0
		sleep 0.02
	done
	kill -QUIT "$pid" 2>/dev/null || true
}

# psql on the node listening on socket directory $1, port $2.
on_node()
{
	local h=$1 p=$2
	shift 2
	as_owner psql -X -q -At -h "$h" -p "$p" -d postgres "$@"
}

# lag-pause / lag-resume of the standby on socket $1, port $2: stop or
# resume its walreceiver; prints its PID.
walreceiver_signal()
{
	local pid
	pid=$(on_node "$1" "$2" -c "SELECT pid FROM pg_stat_wal_receiver")
	[ -n "$pid" ] || {
		echo "no walreceiver on the standby" >&2
		return 1
	}
	kill "-$([ "$cmd" = lag-pause ] && echo STOP || echo CONT)" "$pid"
	echo "$pid"
}

# "TLI LSN": where the newest timeline of data directory $1 began, from its
# history file ("parentTLI switchpoint reason").
switchpoint()
{
	local h
	h=$(ls "$1/pg_wal/"*.history | sort | tail -1)
	echo "$((16#$(basename "$h" .history))) $(tail -1 "$h" | cut -f2)"
}

# Start the old primary's data directory $1 alone, listening only on socket
# directory $2 on a port of its own, waiting for no standby; prints its
# connection string.
start_alone()
{
	local p
	p=$(free_port)
	as_owner "$PG_BINDIR/pg_ctl" -D "$1" -w -t 60 -l "$2/server-alone.log" \
		-o "-c port=$p -c listen_addresses= -c synchronous_standby_names= -c unix_socket_directories=$2" \
		start >/dev/null || {
		tail -20 "$2/server-alone.log" >&2
		return 1
	}
	echo "host=$2 port=$p"
}
