# test/fault/harness.sh -- what the fault suite's and the failover test's
# run.sh share.  Sourced after test/cluster.sh: reads SOAK and SEED from
# the environment (mode "gate" or "soak", soak_flag for the Python harness,
# a random SEED if none), and provides
#
#	harness_workdir NAME	a fresh run directory under $WORK (or /tmp)
#	kill_clients PIDFILE	SIGKILL the client processes a harness recorded
#				(only if they still run workload.py or failover.py)

py=/usr/bin/python3		# Debian's interpreter: it has python3-psycopg
SOAK=${SOAK:-0}
SEED=${SEED:-$(( (RANDOM << 15 | RANDOM) % 1000000 ))}
mode=gate
soak_flag=()
if [ "$SOAK" != 0 ]; then
	mode=soak
	soak_flag=(--soak)
fi

harness_workdir()
{
	local w
	w=$(mktemp -d "${WORK:-/tmp}/$1.XXXXXX")
	chmod 755 "$w"
	echo "$w"
}

kill_clients()
{
	local pid
	[ -f "$1" ] || return 0
	while read -r pid; do
		if { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null |
			grep -q 'workload.py\|failover.py'; then
			kill -CONT "$pid" 2>/dev/null
			kill -KILL "$pid" 2>/dev/null
		fi
	done <"$1"
}
