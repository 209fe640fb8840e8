#!/bin/bash
# test/fault/server.sh -- server orchestration for test/fault/workload.py.
#
#	server.sh restart CLUSTER_DIR [DOWNTIME]
#		immediate stop (SIGQUIT to the postmaster, by PID), DOWNTIME
#		seconds with no server, start on the same data directory and port
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/test/cluster.sh"

case ${1:-} in
	restart)
		CLUSTER_DIR=$2
		cluster_restart immediate "${3:-0}"
		echo "restarted: postmaster $CLUSTER_PID"
		;;
	*)
		echo "usage: $0 restart CLUSTER_DIR [DOWNTIME]" >&2
		exit 2
		;;
esac
