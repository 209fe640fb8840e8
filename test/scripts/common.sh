# test/scripts/common.sh -- what every script test starts with.
#
# Sourced by the scripts in test/scripts after "set -euo pipefail":
#
#	test_cluster_start NAME [postgresql.conf lines...]
#		a throwaway cluster in a fresh directory $dir (see test/cluster.sh),
#		stopped by PID and removed on exit, after $test_on_exit if set
#	psql ...			psql, quiet, stopping at the first error
#	check WHAT GOT WANT	prints "ok - WHAT", or "not ok - WHAT" with both values
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
