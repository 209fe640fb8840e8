#!/bin/bash
# test/scripts/readme_snippets.sh -- run the README's quick start walkthrough.
#
# Extracts each code block that README.md marks with an HTML comment
# "<!-- test: NAME -->" on the line before it, runs it as written against a
# throwaway cluster (each walkthrough part in a database of its own), and
# checks what it did.  Prints "ok - ..." / "not ok - ..." lines for
# test/run.sh.  The psql block runs as a reader would paste it; the
# procedure block is then called again while another owner holds the lease;
# two copies of the Python worker drain the queue at the same time.
set -uo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/test/cluster.sh"

work=${WORK:-$(mktemp -d /tmp/distlock-readme.XXXXXX)}
out="$work/readme_snippets"
mkdir -p "$out"
python=/usr/bin/python3		# Debian's, which has psycopg

dir=$(mktemp -d /tmp/distlock-readme-pg.XXXXXX)
trap 'cluster_stop; rm -rf "$dir"' EXIT
if ! cluster_start "$dir"; then
	echo "not ok - start a throwaway cluster"
	exit 1
fi

# ok DESCRIPTION GOT WANT
is()
{
	if [ "$2" = "$3" ]; then
		echo "ok - $1"
	else
		echo "not ok - $1 (got '$2', want '$3')"
	fi
}

# Write the block marked NAME to file OUT; report whether it exists.
extract()
{
	local name=$1 file=$2 marks
	marks=$(grep -cxF "<!-- test: $name -->" "$top/README.md")
	awk -v mark="<!-- test: $name -->" '
		$0 == mark { armed = 1; next }
		armed && !inside && /^```/ { inside = 1; next }
		armed && !inside && NF { exit }	# the mark must precede a block
		inside && /^```/ { exit }
		inside { print }
	' "$top/README.md" >"$file"
	if [ "$marks" -eq 1 ] && [ -s "$file" ]; then
		echo "ok - README has exactly one \"$name\" block"
		return 0
	fi
	echo "not ok - README has exactly one \"$name\" block (found $marks marks)"
	return 1
}

# q DB SQL: one value, unaligned
q()
{
	psql -X -A -t -q -v ON_ERROR_STOP=1 -d "$1" -c "$2" 2>&1
}

# run_sql DB FILE LOG: run a block as psql would from a file; 0 on success
run_sql()
{
	psql -X -A -t -v ON_ERROR_STOP=1 -d "$1" -f "$2" >"$3" 2>&1
	local rc=$?
	sed 's/^/# /' "$3"
	return $rc
}

for db in readme_sql readme_plpgsql readme_python; do
	psql -X -q -d postgres -c "CREATE DATABASE $db" ||
		echo "not ok - create database $db"
done

#
# (a) psql: a lease, fence, a session and a queue round trip.
#
if extract readme-sql "$out/a.sql"; then
	run_sql readme_sql "$out/a.sql" "$out/a.log"
	is "psql walkthrough runs without error" "$?" 0
	is "host-b is refused while host-a holds the lease (NULL)" \
		"$(grep -B1 '^nightly-report|host-a:1234|' "$out/a.log" | head -1)" ""
	is "active_locks shows host-a's lease with token 1" \
		"$(grep -c '^nightly-report|host-a:1234|1|' "$out/a.log")" 1
	is "the first complete() is accepted, the second refused" \
		"$(grep -xE 't|f' "$out/a.log" | tr '\n' ' ')" "t t f t "
	is "the job is completed once, with its result" \
		"$(q readme_sql "SELECT status || ' ' || attempts || ' ' || result
			FROM distlock.jobs WHERE queue = 'emails'")" \
		'completed 1 {"sent": true}'
	is "the lease was released and the session closed" \
		"$(q readme_sql "SELECT (SELECT count(*) FROM distlock.active_locks)
			+ (SELECT count(*) FROM distlock.sessions)")" 0
fi

#
# (b) The PL/pgSQL procedure: write under the lease, skip while another
# owner holds it, and overwrite only with a newer token.
#
if extract readme-plpgsql "$out/b.sql"; then
	q readme_plpgsql "CREATE EXTENSION distlock" >/dev/null
	run_sql readme_plpgsql "$out/b.sql" "$out/b.log"
	is "procedure walkthrough runs without error" "$?" 0
	is "the procedure wrote today's report under its token" \
		"$(q readme_plpgsql "SELECT r.day = current_date AND r.token = l.token
			AND r.body LIKE '% by host-a:1234'
			FROM nightly_reports r, distlock.locks l
			WHERE l.name = 'nightly-report'")" t
	is "the procedure released the lease" \
		"$(q readme_plpgsql "SELECT count(*) FROM distlock.active_locks")" 0

	# Another owner holds the lease: the procedure must skip the report.
	q readme_plpgsql "SELECT distlock.try_acquire('nightly-report',
		'host-b:5678', '1 minute')" >/dev/null
	psql -X -q -d readme_plpgsql -c "CALL run_nightly_report('host-c:9')" \
		>"$out/b2.log" 2>&1
	is "while host-b holds the lease, the procedure skips the report" \
		"$(grep -c 'another worker holds the lease' "$out/b2.log")" 1
	is "... and the report keeps host-a's token" \
		"$(q readme_plpgsql "SELECT body LIKE '% by host-a:1234'
			FROM nightly_reports")" t
	q readme_plpgsql "SELECT distlock.release('nightly-report',
		'host-b:5678')" >/dev/null
	psql -X -q -d readme_plpgsql -c "CALL run_nightly_report('host-c:9')" \
		>"$out/b3.log" 2>&1
	is "once free, the next caller rewrites the report with a newer token" \
		"$(q readme_plpgsql "SELECT r.body LIKE '% by host-c:9'
			AND r.token = l.token AND l.token > 1
			FROM nightly_reports r, distlock.locks l
			WHERE l.name = 'nightly-report'")" t
fi

#
# (c) The Python worker: two copies drain the queue together.
#
if extract readme-python-setup "$out/c.sql" &&
	extract readme-python "$out/c.py"; then
	q readme_python "CREATE EXTENSION distlock" >/dev/null
	run_sql readme_python "$out/c.sql" "$out/c-setup.log"
	is "Python setup block runs without error" "$?" 0
	PGDATABASE=readme_python "$python" "$out/c.py" >"$out/c1.log" 2>&1 &
	p1=$!
	PGDATABASE=readme_python "$python" "$out/c.py" >"$out/c2.log" 2>&1 &
	p2=$!
	wait $p1
	rc1=$?
	wait $p2
	rc2=$?
	cat "$out/c1.log" "$out/c2.log" | sed 's/^/# /'
	is "two Python workers exit cleanly" "$rc1 $rc2" "0 0"
	is "every job with a recipient completed" \
		"$(q readme_python "SELECT count(*) FROM distlock.jobs
			WHERE queue = 'emails' AND status = 'completed'")" 100
	is "one sent_emails row per completed job, no duplicates, none lost" \
		"$(q readme_python "SELECT count(*) || ' ' || count(DISTINCT s.job_id)
			|| ' ' || count(*) FILTER (WHERE j.status = 'completed'
				AND j.payload->>'to' = s.recipient)
			FROM sent_emails s JOIN distlock.jobs j ON j.id = s.job_id")" \
		"100 100 100"
	is "the job without a recipient failed and waits for a retry" \
		"$(q readme_python "SELECT status || ' ' || (attempts >= 1) || ' '
			|| last_error || ' ' || (run_at > claimed_at)
			FROM distlock.jobs WHERE payload->>'subject' = 'no recipient'")" \
		"pending true no recipient true"
	is "the workers closed their sessions" \
		"$(q readme_python "SELECT count(*) FROM distlock.sessions")" 0
fi
