#!/bin/bash
# test/demo/run.sh -- run the demo client against a throwaway cluster.
#
#	test/demo/run.sh [demo options...]
#
# Called by "make demo" once the extension is installed and test/demo/demo
# is built.  Starts a cluster with test/cluster.sh in a temporary directory
# (as "postgres" when we are root, with distlock preloaded) unless DSN, PGHOST or PGPORT points at a
# server of yours, creates the extension there if it is missing, runs the
# demo, stops the cluster by its PID, and exits with the demo's status.
set -uo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/test/cluster.sh"

psql_args=(-X -q -v ON_ERROR_STOP=1)
if [ -n "${DSN:-}" ]; then
	psql_args+=(-d "$DSN")
	echo "using the server at DSN"
elif [ -n "${PGHOST:-}${PGPORT:-}" ]; then
	echo "using the server at PGHOST=${PGHOST:-} PGPORT=${PGPORT:-}"
else
	dir=$(mktemp -d /tmp/distlock-demo.XXXXXX)
	trap 'cluster_stop; rm -rf "$dir"' EXIT
	# preloaded: waiting workers are woken by the enqueue's commit, and the
	# background worker reaps dead sessions
	cluster_start "$dir" "shared_preload_libraries = 'distlock'" || exit 1
	echo "started a throwaway cluster on 127.0.0.1:$PGPORT (pid $CLUSTER_PID), distlock preloaded"
fi

psql "${psql_args[@]}" -c 'CREATE EXTENSION IF NOT EXISTS distlock' || exit 1

"$top/test/demo/demo" "$@"
exit $?
