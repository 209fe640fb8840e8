# test/scripts/common.sh -- what every script test starts with.
#
# Sourced by the scripts in test/scripts after "set -euo pipefail":
#
#	test_cluster_start NAME [postgresql.conf lines...]
#		a throwaway cluster in a fresh directory $dir (see test/cluster.sh),
#		stopped by PID and removed on exit, after $test_on_exit if set
#	psql ...			psql, quiet, stopping at the first error
#	check WHAT GOT WANT	prints "ok - WHAT", or "not ok - WHAT" with both values
#	standby_start		a hot standby streaming from the cluster, made from a
#						base backup in $dir/standby, on port $sport
#						($standby_pid); stop_standby stops it
#
# $top is the checkout.

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$top/test/cluster.sh"

psql()
{
	command psql -X -q -v ON_ERROR_STOP=1 "$@"
}

check()
{
	if [ "$2" = "$3" ]; then
		echo "ok - $1"
	else
		echo "not ok - $1: got '$2', expected '$3'"
	fi
}

test_cleanup()
{
	${test_on_exit:-:}
	cluster_stop
	rm -rf "$dir"
}

test_cluster_start()
{
	dir=$(mktemp -d "/tmp/distlock-$1.XXXXXX")
	shift
	trap test_cleanup EXIT
	cluster_start "$dir" "$@"
}

standby_pid=
standby_start()
{
	mkdir -p "$dir/standby" && chown postgres: "$dir/standby"
	as_owner "$PG_BINDIR/pg_basebackup" -h "$PGHOST" -p "$PGPORT" -U postgres \
		-D "$dir/standby/data" -R -X stream >/dev/null
	sport=$(free_port)
	as_owner sed -i "s/^port = .*/port = $sport/; s|^unix_socket_directories = .*|unix_socket_directories = '$dir/standby'|" \
		"$dir/standby/data/postgresql.conf"
	echo "hot_standby = on" | as_owner tee -a "$dir/standby/data/postgresql.conf" >/dev/null
	as_owner "$PG_BINDIR/pg_ctl" -D "$dir/standby/data" -w -t 60 -l "$dir/standby/server.log" start >/dev/null
	standby_pid=$(head -1 "$dir/standby/data/postmaster.pid")
}

stop_standby()
{
	[ -n "$standby_pid" ] || return 0
	kill -INT "$standby_pid" 2>/dev/null || true	# fast, as cluster_stop
	for _ in $(seq 1 100); do
		kill -0 "$standby_pid" 2>/dev/null || break
		sleep 0.1
	done
}
