#!/bin/bash
# test/scripts/token_crash.sh -- a fencing token a client has seen is never
# handed out again after a crash, whatever synchronous_commit says.
#
# With synchronous_commit off, each round grants a lock (a new name each
# time, so each grant draws a new token) and crashes the server at once
# (immediate shutdown: no checkpoint, crash recovery at the next start);
# every token must be larger than every token seen before.  A token seen
# in a transaction that rolled back must not come back either.  Without
# the WAL flush after each token is drawn, nextval()'s log-ahead record is
# lost with the crash and the sequence restarts below tokens in clients'
# hands (every round got token 1).
set -euo pipefail
. "$(dirname "$0")/common.sh"

rounds=${ROUNDS:-12}
test_cluster_start token-crash "synchronous_commit = off"
psql -c "CREATE EXTENSION distlock" -c "CHECKPOINT"

max=0
repeats=0
for i in $(seq 1 "$rounds"); do
	if [ $((i % 3)) -eq 0 ]; then
		# seen, then rolled back
		t=$(psql -At -c "BEGIN" -c "SELECT distlock.try_acquire('crash-$i', 'w')" -c "ROLLBACK" | sed -n 1p)
	else
		t=$(psql -At -c "SELECT distlock.try_acquire('crash-$i', 'w')")
	fi
	[ "$t" -gt "$max" ] || repeats=$((repeats + 1))
	max=$t
	cluster_restart immediate
done
check "$rounds grants, each followed by a crash: tokens only go up" "$repeats" 0
last=$(psql -At -c "SELECT distlock.try_acquire('crash-last', 'w')")
check "the first grant after the last crash exceeds every token seen" \
	"$([ "$last" -gt "$max" ] && echo yes || echo "no ($last <= $max)")" yes
