# test/cluster.sh -- start and stop a throwaway PostgreSQL cluster.
#
# Sourced by the test and demo scripts.  The cluster lives in a fresh
# temporary directory, runs as the "postgres" user when we are root (initdb
# refuses to run as root), listens on loopback on a free port, and is always
# stopped by the postmaster's PID.
#
#	cluster_start DIR [extra postgresql.conf lines...]
#		sets PGHOST, PGPORT, PGUSER, PGDATABASE and CLUSTER_PID
#	cluster_stop [immediate]		fast shutdown, or immediate
#	cluster_restart [immediate] [DOWNTIME]	same data directory and port
#	cluster_pid_refresh			CLUSTER_PID from the pid file
#	pgbouncer_start DIR DBNAME	PgBouncer (transaction pooling) in front

# The server of the PG_CONFIG the build used (make exports it).
PG_CONFIG=${PG_CONFIG:-pg_config}
PG_BINDIR=${PG_BINDIR:-$("$PG_CONFIG" --bindir)}
# psql, pg_dump, pgbench... of the same server first.
export PATH="$PG_BINDIR:$PATH"

# Run a command as the cluster's owner.
as_owner()
{
	if [ "$(id -u)" -eq 0 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

# A TCP port on loopback that nothing listens on.
free_port()
{
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

cluster_start()
{
	CLUSTER_DIR=$1
	shift
	mkdir -p "$CLUSTER_DIR"
	[ "$(id -u)" -eq 0 ] && chown postgres: "$CLUSTER_DIR"
	as_owner "$PG_BINDIR/initdb" -D "$CLUSTER_DIR/data" -U postgres \
		--no-locale -E UTF8 -A trust >"$CLUSTER_DIR/initdb.log" 2>&1 || {
		cat "$CLUSTER_DIR/initdb.log" >&2
		return 1
	}
	PGPORT=$(free_port)
	{
		echo "port = $PGPORT"
		echo "listen_addresses = '127.0.0.1'"
		echo "unix_socket_directories = '$CLUSTER_DIR'"
		echo "max_connections = 120"
		for line in "$@"; do echo "$line"; done
	} | as_owner tee -a "$CLUSTER_DIR/data/postgresql.conf" >/dev/null
	as_owner "$PG_BINDIR/pg_ctl" -D "$CLUSTER_DIR/data" -w -t 60 \
		-l "$CLUSTER_DIR/server.log" start >/dev/null || {
		cat "$CLUSTER_DIR/server.log" >&2
		return 1
	}
	CLUSTER_PID=$(head -1 "$CLUSTER_DIR/data/postmaster.pid")
	export PGHOST=127.0.0.1 PGPORT PGUSER=postgres PGDATABASE=postgres
}

# Stop the postmaster by its PID: fast shutdown (SIGINT: sessions are
# disconnected, their transactions rolled back, then a shutdown
# checkpoint), or immediate (SIGQUIT) if asked.  Not
# SIGTERM: a smart shutdown waits for every client to leave, and a test's
# client still connected (a transaction holding the horizon in pg_sleep)
# would hold it up.  A server still up after 60 s gets SIGQUIT, so that
# none outlives the directory its caller removes next.
cluster_stop()
{
	local sig=INT i
	[ "${1:-}" = immediate ] && sig=QUIT
	[ -n "${CLUSTER_PID:-}" ] || return 0
	kill -$sig "$CLUSTER_PID" 2>/dev/null || true
	for i in $(seq 1 700); do
		kill -0 "$CLUSTER_PID" 2>/dev/null || break
		if [ "$i" -eq 600 ]; then
			kill -QUIT "$CLUSTER_PID" 2>/dev/null || true
		fi
		sleep 0.1
	done
	CLUSTER_PID=
}

# Restart the cluster of cluster_start on the same data directory and port:
# stop it (fast, or "immediate": no checkpoint, crash recovery at start),
# wait $2 seconds, start it again.  Works in another shell that sourced this
# file with only CLUSTER_DIR set: the postmaster's PID comes from its pid
# file.
cluster_restart()
{
	cluster_pid_refresh
	cluster_stop "${1:-fast}"
	sleep "${2:-0}"
	as_owner "$PG_BINDIR/pg_ctl" -D "$CLUSTER_DIR/data" -w -t 60 \
		-l "$CLUSTER_DIR/server.log" start >/dev/null || {
		tail -20 "$CLUSTER_DIR/server.log" >&2
		return 1
	}
	CLUSTER_PID=$(head -1 "$CLUSTER_DIR/data/postmaster.pid")
}

# Set CLUSTER_PID from the pid file of the cluster in CLUSTER_DIR, for a
# cluster that another process may have restarted (only if that PID is a
# postgres process: a stale file may name a PID in use by another).
cluster_pid_refresh()
{
	local pid
	pid=$(head -1 "$CLUSTER_DIR/data/postmaster.pid" 2>/dev/null) || return 0
	[ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = postgres ] &&
		CLUSTER_PID=$pid
	return 0
}

# pgbouncer_start DIR DBNAME: PgBouncer in transaction pooling mode on a
# free loopback port in front of database DBNAME of the cluster; sets
# PGB_PORT and PGB_PID.  Stop it with kill $PGB_PID.
pgbouncer_start()
{
	local d=$1 db=$2
	mkdir -p "$d"
	PGB_PORT=$(free_port)
	cat >"$d/pgbouncer.ini" <<EOF
[databases]
$db = host=127.0.0.1 port=$PGPORT dbname=$db user=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PGB_PORT
unix_socket_dir =
auth_type = trust
auth_file = $d/userlist.txt
pool_mode = transaction
default_pool_size = 8
max_client_conn = 200
server_reset_query =
server_login_retry = 1
ignore_startup_parameters = extra_float_digits
logfile = $d/pgbouncer.log
pidfile = $d/pgbouncer.pid
EOF
	echo '"postgres" ""' >"$d/userlist.txt"
	[ "$(id -u)" -eq 0 ] && chown -R postgres: "$d"
	as_owner pgbouncer -d -q "$d/pgbouncer.ini" || return 1
	for _ in $(seq 1 50); do
		[ -s "$d/pgbouncer.pid" ] && break
		sleep 0.1
	done
	PGB_PID=$(cat "$d/pgbouncer.pid" 2>/dev/null)
	[ -n "$PGB_PID" ]
}
