#!/usr/bin/python3
"""bench/bench.py -- distlock against the SQL it replaces, side by side.

Run by bench/run.sh, which starts a throwaway cluster and exports PGHOST,
PGPORT and PGUSER (a superuser).  Every workload compares distlock with the
hand-written SQL (and the extensions) it replaces: each runs pgbench
(-M prepared) at several client counts, and within one client count the
variants take turns in short rounds (their order rotated every round), so
that a noisy machine slows them alike and their ratio holds.  Each round
starts from the same state: the queues are refilled, the tables vacuumed
and a checkpoint taken, so that every round pays the same full-page images.

Per variant and client count it reports operations per second (lock
cycles, heartbeats, jobs or events), mean and 99th-percentile latency of
one pgbench transaction (one script: for a job cycle, the claim and the
acknowledgement), WAL bytes per operation (pg_current_wal_insert_lsn()
before and after), and distlock's throughput divided by the baseline's.
The table goes to stdout and to bench/results/latest.txt, every figure to
bench/results/bench-<time>.csv.  It measures and never asserts: the
"Targets" list says which of issue 5's ratios this run met.

Environment: QUICK=1 (short rounds, smaller scaling sets), ROUNDS,
ROUND_SECS, CLIENTS ("1 4 16"), PASSES ("on off": synchronous_commit),
WORKLOADS (a subset of: lock contended heartbeat job1 job10 job100 enqueue
floor scaling; and e2e and wake, which bench/run.sh runs with bench/e2e.py
and bench/wake.py; whatif, whatif10 and whatif100, an experiment on
distlock.jobs' indexes and fillfactor with one job, 10 or 100 per claim,
that runs only when named).
"""

import contextlib
import csv
import datetime
import glob
import math
import os
import re
import subprocess
import sys
import time

import psycopg

BENCH = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(BENCH, "results")
WORK = os.environ.get("BENCH_WORK", "/tmp")
QUICK = os.environ.get("QUICK", "") not in ("", "0")
SECS = int(os.environ.get("ROUND_SECS", "2" if QUICK else "3"))
ROUNDS = int(os.environ.get("ROUNDS", "1" if QUICK else "2"))
CLIENTS = [int(c) for c in os.environ.get("CLIENTS", "1 4 16").split()]
PASSES = os.environ.get("PASSES", "on off").split()
ONLY = os.environ.get("WORKLOADS", "").split()
HAVE_PGQ = os.environ.get("HAVE_PGQ", "0") == "1"
WALDETAIL = os.environ.get("WALDETAIL", "") not in ("", "0")

# Scaling backgrounds (full / QUICK).
SCALE_PENDING = 10_000
SCALE_BIG = 100_000 if QUICK else 1_000_000
SCALE_FINISHED = 50_000 if QUICK else 500_000
HELD_SECS = 10 if QUICK else 60

PAYLOAD_SQL = "jsonb_build_object('to', 'user' || g || '@example.com')"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Db:
    """The superuser connection that prepares rounds and reads counters."""

    def __init__(self):
        self.conn = psycopg.connect(dbname="postgres", autocommit=True)

    def run(self, sql, params=None):
        with self.conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else None

    def one(self, sql, params=None):
        return self.run(sql, params)[0][0]

    def lsn(self):
        return self.one("SELECT pg_current_wal_insert_lsn()::text")

    def wal_since(self, lsn, ops):
        """WAL written since lsn: (record bytes, full-page image bytes).

        Read with pg_walinspect, once the WAL is flushed that far.
        """
        end = self.lsn()
        if self.one("SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", (end, lsn)) <= 0:
            return (0, 0)
        for i in range(200):
            if self.one("SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", (end,)):
                break
            if i == 20:
                # With synchronous_commit off the WAL writer may flush no
                # further than the last asynchronous commit, short of end
                # (pg_walinspect refuses an end past the flush: "cannot
                # accept future end LSN"): commit something synchronously.
                with self.conn.transaction():
                    self.run("SET LOCAL synchronous_commit = on")
                    self.run("SELECT pg_current_xact_id()")
            time.sleep(0.05)
        rows = self.run("SELECT \"resource_manager/record_type\", count, record_size, fpi_size"
                        " FROM pg_get_wal_stats(%s::pg_lsn, %s::pg_lsn, true)"
                        " WHERE count > 0 ORDER BY record_size + fpi_size DESC", (lsn, end))
        if WALDETAIL:
            for name, count, size, fpi in rows[:8]:
                log(f"      {name:28} {count / max(ops, 1):8.2f}/op {size / max(ops, 1):8.0f} B/op"
                    f" {fpi / max(ops, 1):8.0f} FPI B/op")
        return (sum(int(r[2]) for r in rows), sum(int(r[3]) for r in rows))


# --- filling and resetting the queues -------------------------------------

def fill_distlock(db, n, queue="bench", status="pending", priority=0):
    db.run(f"""
        INSERT INTO distlock.jobs (queue, payload, status, priority, run_at,
            attempts, max_attempts, created_at, created_by, queue_owner,
            finished_at)
        SELECT %s, {PAYLOAD_SQL}, %s::distlock.job_status, %s, now(), 0, 5,
               now(), 'app'::regrole, 'app'::regrole,
               CASE WHEN %s = 'completed' THEN now() END
          FROM generate_series(1, %s) g""", (queue, status, priority, status, n))


def fill_tasks(db, n, queue="bench", state="pending", priority=0):
    db.run(f"""
        INSERT INTO tasks (queue, payload, state, priority, finished_at)
        SELECT %s, {PAYLOAD_SQL}, %s::task_state, %s,
               CASE WHEN %s = 'completed' THEN now() END
          FROM generate_series(1, %s) g""", (queue, state, priority, state, n))


def fill_reports(db, n):
    db.run(f"INSERT INTO reports (payload) SELECT {PAYLOAD_SQL} FROM generate_series(1, %s) g",
           (n,))


def pgq_reset(db, queues, batch, events_per_queue):
    """Drop and recreate the PgQ queues, with ticks every batch events."""
    for q in queues:
        if db.one("SELECT count(*) FROM pgq.queue WHERE queue_name = %s", (q,)):
            db.run("SELECT pgq.drop_queue(%s, true)", (q,))
        db.run("SELECT pgq.create_queue(%s)", (q,))
        db.run("SELECT pgq.set_queue_config(%s, 'ticker_max_count', %s)", (q, str(batch)))
        db.run("SELECT pgq.set_queue_config(%s, 'ticker_max_lag', '1 day')", (q,))
        db.run("SELECT pgq.set_queue_config(%s, 'ticker_idle_period', '1 day')", (q,))
        db.run("SELECT pgq.register_consumer(%s, 'bench')", (q,))
        # the first batch after registration spans the registration tick
        db.run("SELECT pgq.force_tick(%s)", (q,))
        db.run("SELECT pgq.ticker(%s)", (q,))
        if events_per_queue:
            db.run("CALL bench_pgq_fill(%s, %s, %s)",
                   (q, math.ceil(events_per_queue / batch), batch))


PGQ_FILL = """
CREATE PROCEDURE bench_pgq_fill(q text, batches integer, n integer)
LANGUAGE plpgsql AS $$
BEGIN
	SET LOCAL synchronous_commit = off;
	FOR b IN 1..batches LOOP
		PERFORM pgq.insert_event(q, 'job',
			jsonb_build_object('to', 'user' || g || '@example.com')::text)
		   FROM generate_series(1, n) g;
		COMMIT;
		SET LOCAL synchronous_commit = off;
		PERFORM pgq.ticker(q);
		COMMIT;
		SET LOCAL synchronous_commit = off;
	END LOOP;
END $$;
"""

PGQ_CONSUMED = """
SELECT coalesce(sum(t.tick_event_seq), 0)
  FROM pgq.subscription s
  JOIN pgq.queue q ON q.queue_id = s.sub_queue
  JOIN pgq.tick t ON t.tick_queue = s.sub_queue AND t.tick_id = s.sub_last_tick
 WHERE q.queue_name LIKE 'bq%'
"""


# --- workloads ------------------------------------------------------------

class Variant:
    """One way of doing a workload: a pgbench script and its setup."""

    def __init__(self, name, script, kind="baseline", defines=None,
                 prepare=None, counter=None, per_txn=1, builtin=None,
                 needs=None, fill_rate=None, dead_table=None, settings=None):
        self.name = name
        self.script = script
        self.kind = kind            # distlock, baseline, floor
        self.defines = defines or {}
        self.prepare = prepare      # fn(db, clients, est_ops) before a round
        self.counter = counter      # fn(db) -> operations so far
        self.per_txn = per_txn      # operations per transaction otherwise
        self.builtin = builtin
        self.needs = needs          # "pgq", "cc"
        self.fill_rate = fill_rate  # first guess of ops/s, to size fills
        self.dead_table = dead_table    # row versions it leaves dead, counted
        self.settings = settings or {}  # role app's settings for its rounds


def jobs_counter(table, col="status"):
    """Jobs acknowledged so far, kept as completed or deleted: the completed
    rows less the rows (nothing else adds or removes rows during a round)."""
    return lambda db: int(db.one(f"SELECT count(*) FILTER (WHERE {col} = 'completed')"
                                 f" - count(*) FROM {table}"))


def prep_locks(db, clients, est):
    db.run("TRUNCATE job_locks")
    db.run("UPDATE timeout_locks SET holder = NULL, ts = NULL WHERE holder IS NOT NULL")
    db.run("UPDATE distlock.locks SET owner = NULL, session_id = NULL, expires_at = NULL"
           " WHERE owner IS NOT NULL")
    db.run("VACUUM job_locks, timeout_locks, distlock.locks")


def prep_heartbeat(db, clients, est):
    db.run("VACUUM distlock.sessions, worker_sessions")
    # steady state: with shared memory the first beat of a session writes
    # its row ahead (src/beat.c), and the beats after it, for minutes, write
    # nothing; that first write is made here, not in the measured window
    db.run("SELECT distlock.heartbeat(bench_sid(n)) FROM generate_series(0, 15) n")


def dead_versions(db, table):
    """Row versions table's updates and deletes have left so far."""
    return db.one("SELECT n_tup_upd + n_tup_del FROM pg_stat_user_tables"
                  " WHERE relid = %s::regclass", (table,))


def queue_fill_size(est):
    return SCALE_PENDING + int(est * SECS * 2)


def prep_distlock_jobs(db, clients, est):
    db.run("TRUNCATE distlock.jobs")
    fill_distlock(db, queue_fill_size(est))
    db.run("VACUUM ANALYZE distlock.jobs, distlock.sessions")


def prep_tasks(db, clients, est):
    db.run("TRUNCATE tasks")
    fill_tasks(db, queue_fill_size(est))
    db.run("VACUUM ANALYZE tasks")


def prep_reports(db, clients, est):
    db.run("TRUNCATE reports")
    fill_reports(db, queue_fill_size(est))
    db.run("VACUUM ANALYZE reports")
    db.run("SELECT pg_advisory_unlock_all()")


def prep_pgq(batch):
    def prep(db, clients, est):
        per_queue = int(est * SECS * 2 / clients) + 10 * batch
        pgq_reset(db, [f"bq{i}" for i in range(clients)], batch, per_queue)
        db.run("VACUUM ANALYZE pgq.tick, pgq.subscription")
    return prep


def prep_enqueue(db, clients, est):
    db.run("TRUNCATE distlock.jobs, tasks")
    if HAVE_PGQ:
        pgq_reset(db, ["ins"], 1000, 0)
    db.run("VACUUM ANALYZE distlock.jobs, tasks")


# A first guess of a job cycle's jobs/s by batch size, to size the fills.
JOB_FILL_RATE = {1: 5000, 10: 30000, 100: 60000}


def per_claim(batch):
    """How many jobs a cycle of batch claims, as the groups' titles say it."""
    return "1 job per claim" if batch == 1 else f"batches of {batch}"


def job_variants(batch):
    d = {"batch": batch, "have_sid": 0, "jid": 0, "del": 0}
    rate = JOB_FILL_RATE[batch]
    v = [Variant("distlock", "job_distlock.sql", "distlock", d, prep_distlock_jobs,
                 jobs_counter("distlock.jobs"), fill_rate=rate),
         # the same calls keeping no finished job: each acknowledgement
         # deletes its job, as graphile-worker's completion does
         Variant(DELETING, "job_distlock.sql", "distlock", d, prep_distlock_jobs,
                 jobs_counter("distlock.jobs"), fill_rate=rate,
                 settings={"distlock.delete_completed": "on"})]
    if batch == 1:
        v.append(Variant("distlock complete_and_claim", "job_distlock_cc.sql", "distlock", d,
                         prep_distlock_jobs, jobs_counter("distlock.jobs"), needs="cc",
                         fill_rate=rate))
        v.append(Variant("advisory-lock worker", "job_advisory.sql", "baseline", d,
                         prep_reports, jobs_counter("reports"), fill_rate=rate))
    else:
        v.append(Variant("distlock complete_batch_and_claim", "job_distlock_bac.sql", "distlock",
                         d, prep_distlock_jobs, jobs_counter("distlock.jobs"), needs="bac",
                         fill_rate=rate))
    v.append(Variant("SQL SKIP LOCKED", "job_skiplocked.sql", "baseline", d, prep_tasks,
                     jobs_counter("tasks", "state"), fill_rate=rate))
    v.append(Variant(SL_DELETING, "job_skiplocked.sql", "baseline", dict(d, **{"del": 1}),
                     prep_tasks, jobs_counter("tasks", "state"), fill_rate=rate))
    v.append(Variant("SQL SKIP LOCKED, 1 txn",
                     "job_skiplocked_1txn.sql" if batch == 1 else "job_skiplocked_batch_1txn.sql",
                     "baseline", d, prep_tasks, jobs_counter("tasks", "state"), fill_rate=rate))
    v.append(Variant("PgQ", "job_pgq.sql", "baseline", d, prep_pgq(batch),
                     lambda db: int(db.one(PGQ_CONSUMED)), needs="pgq", fill_rate=rate))
    return v


# The job cycle where finished jobs are not kept: distlock with
# distlock.delete_completed, and SKIP LOCKED acknowledging with a DELETE.
DELETING = "distlock, delete_completed"
SL_DELETING = "SQL SKIP LOCKED, DELETE"


def lock_variants(nnames):
    d = {"nnames": nnames}
    return [
        Variant("distlock", "lock_distlock.sql", "distlock", d, prep_locks),
        Variant("upsert lease", "lock_upsert.sql", "baseline", d, prep_locks),
        Variant("timeout UPDATE", "lock_timeout.sql", "baseline", d, prep_locks),
        Variant("advisory lock", "lock_advisory.sql", "baseline", d, prep_locks),
    ]


# --- what if: the job cycle with fewer index entries ---------------------
#
# Not a configuration of distlock: an experiment that bounds what a change
# of distlock.jobs' indexes could buy.  A claim and an acknowledgement each
# update the job's row out of the partial indexes' predicates, so each
# adds an entry to jobs_pkey and to one more index (jobs_running_session_idx,
# jobs_finished_idx): four per job, where the SKIP LOCKED pair adds two.
# Between rounds the "what if" variants replace those indexes, on this
# throwaway cluster, with ones of the same names (distlock finds its
# indexes by name) that take no entries: "2 index entries" empties the two;
# "HOT" also drops the status predicates of jobs_claim_idx and
# jobs_dedup_idx, so that no update of a job changes an indexed column and
# PostgreSQL can update it in place (heap-only) where the page has room;
# "HOT, fillfactor 50" leaves half of each page for that; "fillfactor 70"
# and "fillfactor 50" keep the shipped indexes with room on each page.
# Reaping, retention and deduplication do not work in the index shapes,
# and without the status predicate a claim steps over claimed and finished
# jobs but for its position; the job cycle runs as it ships, on the direct
# path.
# Opt-in: WORKLOADS="whatif whatif10 whatif100" (one job, 10 or 100 per
# claim).

WHATIF_INDEXES = ("jobs_claim_idx", "jobs_dedup_idx", "jobs_running_session_idx",
                  "jobs_finished_idx")
WHATIF_SHAPES = {
    "2 index entries": {
        "jobs_running_session_idx": "(session_id) WHERE false",
        "jobs_finished_idx": "(finished_at) WHERE false",
    },
    "HOT": {
        "jobs_claim_idx": "(queue_owner, queue, priority DESC, run_at, id)",
        "jobs_dedup_idx": "(queue_owner, queue, dedup_key) WHERE dedup_key IS NOT NULL",
        "jobs_running_session_idx": "(id) WHERE false",
        "jobs_finished_idx": "(id) WHERE false",
    },
}
# HOT with room for it: the new version of an updated job stays on its
# page only if the page has room, which pages filled to 100% lack until
# pruning makes some.
WHATIF_SHAPES["HOT, fillfactor 50"] = dict(WHATIF_SHAPES["HOT"], fillfactor=50)
# The shipped indexes with room on the page: an update whose new version
# fits beside the old one logs only the bytes that changed, and no lock
# record for leaving the page.
WHATIF_SHAPES["fillfactor 70"] = {"fillfactor": 70}
WHATIF_SHAPES["fillfactor 50"] = {"fillfactor": 50}
WHATIF_SHIPPED = {}


def whatif_shape(db, shape):
    """Give distlock.jobs the indexes of shape (None: as shipped)."""
    if not WHATIF_SHIPPED:
        for name in WHATIF_INDEXES:
            WHATIF_SHIPPED[name] = db.one(
                "SELECT pg_get_indexdef(%s::regclass)", (f"distlock.{name}",))
        WHATIF_SHIPPED["fillfactor"] = db.one(
            "SELECT coalesce((SELECT option_value FROM pg_options_to_table(reloptions)"
            " WHERE option_name = 'fillfactor'), '100') FROM pg_class"
            " WHERE oid = 'distlock.jobs'::regclass")
    changed = WHATIF_SHAPES.get(shape, {})
    fillfactor = changed.get("fillfactor", WHATIF_SHIPPED["fillfactor"])
    db.run(f"ALTER TABLE distlock.jobs SET (fillfactor = {fillfactor})")
    for name in WHATIF_INDEXES:
        unique = "UNIQUE " if name == "jobs_dedup_idx" else ""
        ddl = (f"CREATE {unique}INDEX {name} ON distlock.jobs {changed[name]}"
               if name in changed else WHATIF_SHIPPED[name])
        db.run(f"DROP INDEX distlock.{name}")
        db.run(ddl)


def prep_whatif(shape):
    def prep(db, clients, est):
        db.run("TRUNCATE distlock.jobs")
        whatif_shape(db, shape)
        prep_distlock_jobs(db, clients, est)
    return prep


# The what-if groups and their batch sizes: one job per claim (the cycle
# bound by its two commits), and batches, where the server's CPU is the
# limit at 1 client and the index entries are most of it.
WHATIF_GROUPS = {"whatif": 1, "whatif10": 10, "whatif100": 100}


def whatif_variants(batch):
    d = {"batch": batch, "have_sid": 0, "jid": 0, "del": 0}
    rate = JOB_FILL_RATE[batch]
    v = [Variant("distlock", "job_distlock.sql", "distlock", d, prep_whatif(None),
                 jobs_counter("distlock.jobs"), fill_rate=rate)]
    for shape in WHATIF_SHAPES:
        v.append(Variant(f"distlock, what if: {shape}", "job_distlock.sql", "distlock", d,
                         prep_whatif(shape), jobs_counter("distlock.jobs"), fill_rate=rate))
    v.append(Variant("SQL SKIP LOCKED", "job_skiplocked.sql", "baseline", d, prep_tasks,
                     jobs_counter("tasks", "state"), fill_rate=rate))
    return v


def whatif_report(results):
    """The what-if shapes' throughput and WAL against SQL SKIP LOCKED's."""
    out = []
    for p in PASSES:
        for key, batch in WHATIF_GROUPS.items():
            for shape in [None] + list(WHATIF_SHAPES):
                name = f"distlock, what if: {shape}" if shape else "distlock"
                parts = []
                for c in CLIENTS:
                    a, b = results.get((p, key, c, name)), results.get(
                        (p, key, c, "SQL SKIP LOCKED"))
                    if a and b and a.ops and b.ops:
                        parts.append(f"{c}: {a.ops_per_s() / b.ops_per_s():.2f}x,"
                                     f" {a.wal_per_op():.0f} vs {b.wal_per_op():.0f} B")
                if parts:
                    out.append(f"- [report] job cycle, {per_claim(batch)}, {shape or 'as shipped'},"
                               f" vs SQL SKIP LOCKED (sync {p}): " + "; ".join(parts))
    return out


# The floor of a cycle of one or two transactions, each of which changes a
# row durably (floor_commit.sql).
FLOOR_COMMITS = {1: "one durable commit", 2: "two durable commits"}

# Groups run only when WORKLOADS names them.
OPT_IN = set(WHATIF_GROUPS)

GROUPS = [
    ("lock", "lock acquire + release, uncontended (10,000 names)", CLIENTS,
     lock_variants(10000)),
    ("contended", "lock acquire (+ release if granted), one name", [16],
     lock_variants(1)),
    ("heartbeat", "session heartbeat", CLIENTS, [
        Variant("distlock", "heartbeat_distlock.sql", "distlock", {"have_sid": 0}, prep_heartbeat,
                dead_table="distlock.sessions"),
        Variant("plain UPDATE", "heartbeat_update.sql", "baseline", {"have_sid": 0}, prep_heartbeat,
                dead_table="worker_sessions"),
    ]),
    ("job1", f"job cycle, {per_claim(1)} (jobs/s)", CLIENTS, job_variants(1)),
    ("job10", f"job cycle, {per_claim(10)} (jobs/s)", CLIENTS, job_variants(10)),
    ("job100", f"job cycle, {per_claim(100)} (jobs/s)", CLIENTS, job_variants(100)),
    ("enqueue", "enqueue one job", CLIENTS, [
        Variant("distlock", "enqueue_distlock.sql", "distlock", {}, prep_enqueue),
        Variant("plain INSERT", "enqueue_insert.sql", "baseline", {}, prep_enqueue),
        Variant("PgQ insert_event", "enqueue_pgq.sql", "baseline", {}, prep_enqueue, needs="pgq"),
    ]),
    ("floor", "the floor: pgbench built-ins and durable commits", CLIENTS, [
        Variant("simple-update -N", None, "floor", {}, None, builtin="simple-update"),
        Variant("SELECT 1", "select1.sql", "floor", {}, None),
        Variant(FLOOR_COMMITS[1], "floor_commit.sql", "floor", {"commits": 1}, None),
        Variant(FLOOR_COMMITS[2], "floor_commit.sql", "floor", {"commits": 2}, None),
    ]),
] + [(key, f"job cycle with fewer index entries, what if, {per_claim(batch)} (jobs/s)",
         CLIENTS, whatif_variants(batch)) for key, batch in WHATIF_GROUPS.items()]


# --- running a round ------------------------------------------------------

def pgbench_cmd(variant, clients, secs):
    """The pgbench command line of variant: clients as role app for secs.
    (pgbench's -d is --debug, not the database, which is its argument.)"""
    cmd = ["pgbench", "-n", "-M", "prepared", "-U", "app",
           "-c", str(clients), "-j", str(min(clients, 2)), "-T", str(secs)]
    for k, v in variant.defines.items():
        cmd += ["-D", f"{k}={v}"]
    if variant.builtin:
        cmd += ["-b", variant.builtin]
    else:
        cmd += ["-f", os.path.join(BENCH, variant.script)]
    return cmd + ["postgres"]


def pgbench(variant, clients, secs, tag):
    prefix = os.path.join(WORK, f"pgbench_log_{tag}")
    for f in glob.glob(prefix + "*"):
        os.unlink(f)
    cmd = pgbench_cmd(variant, clients, secs) + ["--log", "--log-prefix", prefix]
    p = subprocess.run(cmd, capture_output=True, text=True)
    lat = []
    for f in glob.glob(prefix + "*"):
        with open(f) as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 3 and parts[2].isdigit():
                    lat.append(int(parts[2]))
        os.unlink(f)
    m_txn = re.search(r"number of transactions actually processed: (\d+)", p.stdout)
    m_tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", p.stdout)
    aborted = p.returncode != 0 or "aborted" in p.stderr
    if not m_txn or not m_tps:
        return None, p
    txns = int(m_txn.group(1))
    tps = float(m_tps.group(1))
    return {"txns": txns, "secs": txns / tps if tps > 0 else secs,
            "lat": lat, "aborted": aborted}, p


class Cell:
    """Accumulated figures of one variant at one client count."""

    def __init__(self):
        self.ops = 0
        self.txns = 0
        self.secs = 0.0
        self.wal = 0
        self.fpi = 0
        self.lat = []
        self.dead = 0
        self.notes = set()

    def add(self, ops, txns, secs, wal, lat):
        self.ops += ops
        self.txns += txns
        self.secs += secs
        self.wal += wal[0]
        self.fpi += wal[1]
        self.dead += wal[2] if len(wal) > 2 else 0
        self.lat.extend(lat)

    def ops_per_s(self):
        return self.ops / self.secs if self.secs else 0.0

    def mean_ms(self):
        return sum(self.lat) / len(self.lat) / 1000 if self.lat else 0.0

    def p99_ms(self):
        if not self.lat:
            return 0.0
        s = sorted(self.lat)
        return s[min(len(s) - 1, int(math.ceil(0.99 * len(s))) - 1)] / 1000

    def wal_per_op(self):
        return self.wal / self.ops if self.ops else 0.0

    def dead_per_op(self):
        return self.dead / self.ops if self.ops else 0.0

    def fpi_per_op(self):
        return self.fpi / self.ops if self.ops else 0.0


def run_round(db, v, clients, est, tag, secs=SECS, prepare=True):
    """Prepare, run and measure one round; returns (ops, txns, secs, wal, lat)."""
    # the variant's settings, for the pgbench clients' sessions only
    for k, val in v.settings.items():
        db.run(f"ALTER ROLE app SET {k} = {val}")
    try:
        return measure_round(db, v, clients, est, tag, secs, prepare)
    finally:
        for k in v.settings:
            db.run(f"ALTER ROLE app RESET {k}")


def measure_round(db, v, clients, est, tag, secs, prepare):
    for attempt in range(3):
        if prepare and v.prepare:
            v.prepare(db, clients, est)
        db.run("CHECKPOINT")
        before = v.counter(db) if v.counter else 0
        dead = dead_versions(db, v.dead_table) if v.dead_table else 0
        lsn = db.lsn()
        r, p = pgbench(v, clients, secs, tag)
        if r is None:
            raise SystemExit(f"pgbench failed for {v.name}:\n{p.stdout}\n{p.stderr}")
        if r["aborted"]:
            # a queue that ran dry aborts its clients: refill with more
            log(f"    {v.name}: clients aborted ({p.stderr.strip().splitlines()[-1:]});"
                " retrying with a larger fill")
            est = est * 4 + 10000
            if not prepare:
                raise SystemExit(p.stderr)
            continue
        ops = (v.counter(db) - before) if v.counter else r["txns"] * v.per_txn
        wal = db.wal_since(lsn, ops)
        if v.dead_table:
            # the pgbench backends have reported their counts as they exited
            time.sleep(0.6)
            dead = dead_versions(db, v.dead_table) - dead
        return ops, r["txns"], r["secs"], wal + (dead,), r["lat"]
    raise SystemExit(f"{v.name} kept aborting:\n{p.stderr}")


@contextlib.contextmanager
def synchronous_commit(db, value):
    """The cluster's synchronous_commit (ALTER SYSTEM, so that every client
    of a round has it) set to value while the block runs, and back to what
    it was after."""
    old = db.one("SHOW synchronous_commit")
    db.run(f"ALTER SYSTEM SET synchronous_commit = {value}")
    db.run("SELECT pg_reload_conf()")
    try:
        yield
    finally:
        db.run(f"ALTER SYSTEM SET synchronous_commit = {old}")
        db.run("SELECT pg_reload_conf()")


def reset_sessions(db):
    """Compact the session tables, so that a group starts from a normal
    state whatever the heartbeat group left behind (autovacuum is off)."""
    db.run("VACUUM FULL distlock.sessions, worker_sessions")
    db.run("VACUUM ANALYZE distlock.sessions, worker_sessions, distlock.locks")


def run_group(db, key, clients_list, variants, results, passname):
    est = {}
    reset_sessions(db)
    for c in clients_list:
        for rnd in range(ROUNDS):
            order = variants[rnd % len(variants):] + variants[:rnd % len(variants)]
            for v in order:
                cell = results.setdefault((passname, key, c, v.name), Cell())
                e = est.get((v.name, c), v.fill_rate or 0)
                ops, txns, secs, wal, lat = run_round(db, v, c, e, f"{key}_{c}")
                cell.add(ops, txns, secs, wal, lat)
                est[(v.name, c)] = max(ops / secs if secs else 0, 1000)
                log(f"  {passname} {key:9} c={c:<2} r{rnd + 1} {v.name:28} "
                    f"{ops / secs if secs else 0:10.0f} ops/s  {wal[0] / max(ops, 1):8.0f} B/op")


# --- scaling --------------------------------------------------------------

SCALE_VARIANTS = [
    Variant("distlock", "job_distlock.sql", "distlock", {"batch": 1, "have_sid": 0},
            None, jobs_counter("distlock.jobs")),
    Variant("SQL SKIP LOCKED", "job_skiplocked.sql", "baseline", {"batch": 1, "del": 0},
            None, jobs_counter("tasks", "state")),
]


def scale_topup(db, target):
    """Bring both queues back to target pending jobs (new ones at the tail)."""
    n = db.one("SELECT count(*) FROM distlock.jobs WHERE status = 'pending'")
    if n < target:
        fill_distlock(db, target - n)
    n = db.one("SELECT count(*) FROM tasks WHERE state = 'pending'")
    if n < target:
        fill_tasks(db, target - n)
    db.run("VACUUM ANALYZE distlock.jobs, tasks")


def run_scaling(db, results, passname):
    est = {}
    reset_sessions(db)
    scenarios = [
        ("scale 10k pending", 0, SCALE_PENDING),
        (f"scale {SCALE_BIG // 1000}k pending", 0, SCALE_BIG),
        (f"scale {SCALE_FINISHED // 1000}k finished", SCALE_FINISHED, SCALE_PENDING),
    ]
    for key, finished, pending in scenarios:
        db.run("TRUNCATE distlock.jobs, tasks")
        if finished:
            fill_distlock(db, finished, status="completed")
            fill_tasks(db, finished, state="completed")
        for rnd in range(ROUNDS):
            order = SCALE_VARIANTS if rnd % 2 == 0 else SCALE_VARIANTS[::-1]
            for v in order:
                # enough for the round beyond the background, which the
                # round then eats into by about a reserve
                scale_topup(db, pending + int(est.get(v.name, 5000) * SECS * 1.5))
                cell = results.setdefault((passname, key, 1, v.name), Cell())
                ops, txns, secs, wal, lat = run_round(db, v, 1, 0, "scale", prepare=False)
                cell.add(ops, txns, secs, wal, lat)
                est[v.name] = ops / secs
                log(f"  {passname} {key:22} r{rnd + 1} {v.name:20} {ops / secs:8.0f} jobs/s "
                    f"mean {sum(lat) / max(len(lat), 1) / 1000:.3f} ms")

    # a transaction held open for the whole run keeps vacuum from removing
    # what the churn leaves behind
    key = f"scale held xmin {HELD_SECS}s"
    for v in SCALE_VARIANTS:
        db.run("TRUNCATE distlock.jobs, tasks")
        fill_distlock(db, SCALE_FINISHED, status="completed")
        fill_tasks(db, SCALE_FINISHED, state="completed")
        scale_topup(db, SCALE_PENDING + int(est.get(v.name, 5000) * HELD_SECS * 1.2))
        holder = subprocess.Popen(
            ["psql", "-X", "-q", "-d", "postgres", "-c", "BEGIN",
             "-c", "SELECT pg_current_xact_id()", "-c", f"SELECT pg_sleep({HELD_SECS + 30})"],
            env=dict(os.environ, PGAPPNAME="bench_holder"),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            if db.one("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'bench_holder'"
                      " AND backend_xid IS NOT NULL"):
                break
            time.sleep(0.1)
        cell = results.setdefault((passname, key, 1, v.name), Cell())
        ops, txns, secs, wal, lat = run_round(db, v, 1, 0, "held", secs=HELD_SECS, prepare=False)
        cell.add(ops, txns, secs, wal, lat)
        db.run("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
               " WHERE application_name = 'bench_holder'")
        holder.wait()
        log(f"  {passname} {key:22}    {v.name:20} {ops / secs:8.0f} jobs/s "
            f"mean {sum(lat) / max(len(lat), 1) / 1000:.3f} ms")
    db.run("TRUNCATE distlock.jobs, tasks")
    db.run("VACUUM distlock.jobs, tasks")


# --- report ---------------------------------------------------------------

def group_title(key):
    for k, title, _, _ in GROUPS:
        if k == key:
            return title
    return key


def table(results, passname):
    rows = []
    keys = [k for k in results if k[0] == passname]
    seen = []
    for k in keys:
        if (k[1], k[2]) not in seen:
            seen.append((k[1], k[2]))
    lines = ["| workload | clients | variant | ops/s | mean ms | p99 ms | WAL B/op | distlock ÷ this |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for g, c in seen:
        ref = results.get((passname, g, c, "distlock"))
        for k in keys:
            if k[1] != g or k[2] != c:
                continue
            cell = results[k]
            ratio = ""
            if ref and k[3] != "distlock" and not k[3].startswith("distlock") \
                    and cell.ops_per_s() > 0 and g != "floor":
                ratio = f"{ref.ops_per_s() / cell.ops_per_s():.2f}"
            lines.append(f"| {g} | {c} | {k[3]} | {cell.ops_per_s():,.0f} | {cell.mean_ms():.3f} | "
                         f"{cell.p99_ms():.3f} | {cell.wal_per_op():,.0f} | {ratio} |")
            rows.append((passname, g, c, k[3], cell))
    return lines, rows


def cell_ops(results, p, g, c, v):
    cell = results.get((p, g, c, v))
    return cell.ops_per_s() if cell and cell.secs else None


def check_ratio(out, results, label, p, g, clients, num, den, goal, both=False):
    """A throughput ratio target; the issues set them with synchronous_commit
    on (the lock cycle's for both): other sync-off ratios are shown for
    information."""
    parts = []
    ok = True
    for c in clients:
        a, b = cell_ops(results, p, g, c, num), cell_ops(results, p, g, c, den)
        if a is None or b is None or b == 0:
            continue
        r = a / b
        ok = ok and r >= goal
        parts.append(f"{c}: {r:.2f}x")
    if parts:
        verdict = ("met" if ok else "NOT met") if (p == "on" or both) else "info"
        out.append(f"- [{verdict}] {label} (sync {p}): "
                   + ", ".join(parts) + f" (goal >= {goal}x)")


def check_wal(out, results, p, g, clients, goal_label, num="distlock", den="SQL SKIP LOCKED"):
    """num's WAL per job at or below den's."""
    parts = []
    ok = True
    for c in clients:
        a = results.get((p, g, c, num))
        b = results.get((p, g, c, den))
        if a and b and a.ops and b.ops:
            ok = ok and a.wal_per_op() <= b.wal_per_op()
            parts.append(f"{c}: {a.wal_per_op():.0f} vs {b.wal_per_op():.0f} B")
    if parts:
        verdict = ("met" if ok else "NOT met") if p == "on" else "info"
        out.append(f"- [{verdict}] {goal_label} (sync {p}): " + ", ".join(parts))


def targets(results):
    """Issue 5's targets, as met or not by this run."""
    out = []
    for p in PASSES:
        check_ratio(out, results, "job cycle vs advisory-lock worker", p, "job1", CLIENTS,
                    "distlock", "advisory-lock worker", 1.7)
        check_ratio(out, results, "job cycle vs SQL SKIP LOCKED", p, "job1", CLIENTS,
                    "distlock", "SQL SKIP LOCKED", 1.0)
        check_ratio(out, results,
                    "job cycle in one transaction (complete_and_claim) vs SQL SKIP LOCKED",
                    p, "job1", CLIENTS, "distlock complete_and_claim", "SQL SKIP LOCKED", 1.5)
        for b in ("job10", "job100"):
            check_ratio(out, results, f"batched claim ({b[3:]}) vs batched SQL", p, b, CLIENTS,
                        "distlock", "SQL SKIP LOCKED", 1.0)
            check_ratio(out, results, f"batched claim ({b[3:]}) vs PgQ", p, b, CLIENTS,
                        "distlock", "PgQ", 1.0)
        check_ratio(out, results, "lock acquire + release vs upsert lease", p, "lock", CLIENTS,
                    "distlock", "upsert lease", 1.0, both=True)
        check_ratio(out, results, "contended attempts vs upsert lease", p, "contended", [16],
                    "distlock", "upsert lease", 5.0)
        check_wal(out, results, p, "job1", CLIENTS, "job cycle WAL per job <= SQL SKIP LOCKED")
        base = results.get((p, "scale 10k pending", 1, "distlock"))
        if base and base.lat:
            for g in (f"scale {SCALE_BIG // 1000}k pending", f"scale {SCALE_FINISHED // 1000}k finished"):
                cell = results.get((p, g, 1, "distlock"))
                if cell and cell.lat:
                    r = cell.mean_ms() / base.mean_ms()
                    out.append(f"- [{'met' if r <= 1.5 else 'NOT met'}] claim latency, {g[6:]} vs 10k"
                               f" pending (sync {p}): {r:.2f}x (goal <= 1.5x)")
    return out


# Issue 17's throughput targets against the floor of their cycle's shape:
# (group, jobs per cycle, distlock's variant, commits per cycle, baseline).
CEILINGS = [
    ("job1", 1, "distlock", 2, "SQL SKIP LOCKED"),
    ("job1", 1, "distlock complete_and_claim", 1, "SQL SKIP LOCKED, 1 txn"),
    ("job10", 10, "distlock", 2, "SQL SKIP LOCKED"),
    ("job10", 10, "distlock complete_batch_and_claim", 1, "SQL SKIP LOCKED, 1 txn"),
    ("job100", 100, "distlock", 2, "SQL SKIP LOCKED"),
    ("job100", 100, "distlock complete_batch_and_claim", 1, "SQL SKIP LOCKED, 1 txn"),
]


def ceiling_parts(results, p, clients, floor, batch, base):
    """Per client count, "c: r.rrx": the cycles per second of floor, a
    (group, variant) of floor_commit.sql, times batch, over the jobs per
    second of base, a (group, variant)."""
    parts = []
    for c in clients:
        f = cell_ops(results, p, floor[0], c, floor[1])
        b = cell_ops(results, p, base[0], c, base[1])
        if f is not None and b:
            parts.append(f"{c}: {f * batch / b:.2f}x")
    return parts


def shape_ceilings(results, p):
    """The most each throughput ratio could be here: a cycle of as many
    transactions as distlock's variant commits, each changing a row durably,
    does at least the work of the floor's cycle of that many commits (one
    row of the client's own updated in place), so its jobs per second are
    at most the floor's cycles per second times the batch; over the
    baseline's jobs per second in the same run."""
    out = []
    for g, batch, num, commits, den in CEILINGS:
        parts = ceiling_parts(results, p, CLIENTS, ("floor", FLOOR_COMMITS[commits]), batch,
                              (g, den))
        if parts:
            out.append(f"- [report] ceiling of {num}, {per_claim(batch)}, vs {den}:"
                       f" {FLOOR_COMMITS[commits]} a cycle (floor_commit.sql) allow at most "
                       + ", ".join(parts))
    return out


def targets17(results):
    """Issue 17's targets (synchronous_commit on), as met or not by this run."""
    out = []
    p = "on"
    held = f"scale held xmin {HELD_SECS}s"
    finished = f"scale {SCALE_FINISHED // 1000}k finished"
    for v in ("distlock", "SQL SKIP LOCKED"):
        h, f = cell_ops(results, p, held, 1, v), cell_ops(results, p, finished, 1, v)
        if h and f:
            line = (f"{v}: {h:,.0f} jobs/s over {HELD_SECS} s beside {SCALE_FINISHED // 1000}k"
                    f" finished jobs with vacuum held back, {f:,.0f} jobs/s after VACUUM:"
                    f" {h / f:.2f}x")
            if v == "distlock":
                out.append(f"- [{'met' if h / f >= 0.7 else 'NOT met'}] {line} (goal >= 0.7x)")
            else:
                out.append(f"- [report] {line}")
    check_ratio(out, results, "vacuum held back: distlock vs SQL SKIP LOCKED", p, held, [1],
                "distlock", "SQL SKIP LOCKED", 3.0)
    check_ratio(out, results, "job cycle, 1 job per call, vs SQL SKIP LOCKED", p, "job1", CLIENTS,
                "distlock", "SQL SKIP LOCKED", 1.5)
    out += shape_ceilings(results, p)
    check_ratio(out, results, "complete_and_claim vs SQL SKIP LOCKED in 1 txn", p, "job1", CLIENTS,
                "distlock complete_and_claim", "SQL SKIP LOCKED, 1 txn", 1.5)
    for b in ("job10", "job100"):
        check_ratio(out, results, f"batches of {b[3:]} vs batched SQL SKIP LOCKED", p, b, CLIENTS,
                    "distlock", "SQL SKIP LOCKED", 1.3)
    for b in ("job10", "job100"):
        check_ratio(out, results, f"batches of {b[3:]} in one call and 1 txn"
                    " (complete_batch_and_claim) vs batched SQL SKIP LOCKED in 1 txn", p, b,
                    CLIENTS, "distlock complete_batch_and_claim", "SQL SKIP LOCKED, 1 txn", 1.3)
    for b in ("job1", "job10", "job100"):
        check_wal(out, results, p, b, CLIENTS, f"WAL per job <= SQL SKIP LOCKED ({b})")
    # keeping no finished job: against the same SKIP LOCKED, and against
    # SKIP LOCKED deleting its jobs too
    for b in ("job1", "job10", "job100"):
        check_wal(out, results, p, b, CLIENTS, f"WAL per job, {DELETING}, <= SQL SKIP LOCKED ({b})",
                  DELETING)
        check_wal(out, results, p, b, CLIENTS, f"WAL per job, {DELETING}, <= {SL_DELETING} ({b})",
                  DELETING, SL_DELETING)
    for den in ("SQL SKIP LOCKED", SL_DELETING):
        check_ratio(out, results, f"job cycle, {DELETING}, vs {den}", p, "job1", CLIENTS,
                    DELETING, den, 1.5)
        for b in ("job10", "job100"):
            check_ratio(out, results, f"batches of {b[3:]}, {DELETING}, vs {den}", p, b,
                        CLIENTS, DELETING, den, 1.3)
    parts = []
    ok = True
    for c in CLIENTS:
        d = results.get((p, "heartbeat", c, "distlock"))
        u = results.get((p, "heartbeat", c, "plain UPDATE"))
        if d and u and d.ops and u.ops:
            r = d.ops_per_s() / u.ops_per_s()
            ok = ok and round(d.wal_per_op()) == 0 and round(d.dead_per_op(), 2) == 0 and r >= 2
            parts.append(f"{c}: {d.wal_per_op():.2f} B and {d.dead_per_op():.3f} dead row"
                         f" versions per beat ({u.wal_per_op():.0f} B and {u.dead_per_op():.2f} for"
                         f" the UPDATE), {r:.2f}x")
    if parts:
        out.append(f"- [{'met' if ok else 'NOT met'}] heartbeat: 0 WAL per beat and >= 2x a plain"
                   " UPDATE: " + ", ".join(parts))
    base = results.get((p, "scale 10k pending", 1, "distlock"))
    big = results.get((p, f"scale {SCALE_BIG // 1000}k pending", 1, "distlock"))
    if base and big and base.lat and big.lat:
        r = big.mean_ms() / base.mean_ms()
        out.append(f"- [{'met' if r <= 1.3 else 'NOT met'}] claim latency, {SCALE_BIG // 1000}k vs"
                   f" 10k pending: {r:.2f}x (goal <= 1.3x)")
    return out


def main():
    os.makedirs(RESULTS, exist_ok=True)
    if ONLY and set(ONLY) <= {"wake", "e2e"}:
        # only the end-to-end or the waiting calls' rows: bench/e2e.py and
        # bench/wake.py, which run.sh runs next, append them to a
        # latest.txt of this run
        open(os.path.join(RESULTS, "latest.txt"), "w").close()
        return
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    db = Db()
    # the calls an older distlock may lack, by the needs of the variants using them
    have = {need: db.one("SELECT count(*) FROM pg_proc p JOIN pg_namespace n"
                         " ON n.oid = p.pronamespace WHERE nspname = 'distlock' AND proname = %s",
                         (proname,)) > 0
            for need, proname in (("cc", "complete_and_claim"),
                                  ("bac", "complete_batch_and_claim"))}
    if HAVE_PGQ:
        db.run(PGQ_FILL)
    results = {}
    head = (f"distlock bench {stamp}: {os.cpu_count()} cores, PostgreSQL "
            f"{db.one('SHOW server_version')}, fsync {db.one('SHOW fsync')}, "
            f"{ROUNDS} round(s) of {SECS} s per variant and client count"
            f"{' (QUICK)' if QUICK else ''}")
    log(head)
    for passname in PASSES:
        # each pass restores the cluster's setting: bench/run.sh runs e2e.py
        # and wake.py on this cluster next (until 2026-11-27 the waiting
        # calls were measured with the last pass's asynchronous commits)
        with synchronous_commit(db, passname):
            db.run("SELECT pg_stat_reset_shared('wal')")
            time.sleep(0.2)
            for key, title, clients_list, variants in GROUPS:
                if (ONLY or key in OPT_IN) and key not in ONLY:
                    continue
                vs = [v for v in variants
                      if not (v.needs == "pgq" and not HAVE_PGQ) and have.get(v.needs, True)]
                log(f"== synchronous_commit {passname}: {title}")
                run_group(db, key, clients_list, vs, results, passname)
                if key in WHATIF_GROUPS:
                    whatif_shape(db, None)
            if (not ONLY or "scaling" in ONLY) and passname == PASSES[0]:
                log(f"== synchronous_commit {passname}: scaling")
                run_scaling(db, results, passname)

    out = [head, ""]
    csv_rows = []
    for passname in PASSES:
        lines, rows = table(results, passname)
        if len(lines) > 2:
            out += [f"synchronous_commit = {passname}", ""] + lines + [""]
        csv_rows += rows
    t5, t17 = targets(results), targets17(results)
    if t5:
        out += ["Targets (issue 5):", ""] + t5 + [""]
    if t17:
        out += ["Targets (issue 17; the end-to-end rows against graphile-worker"
                " follow from bench/e2e.py):", ""] + t17 + [""]
    if any(k[1] in WHATIF_GROUPS for k in results):
        out += ["What if distlock.jobs' updates added fewer index entries (not a"
                " configuration: bench/bench.py, WORKLOADS=\"whatif whatif10 whatif100\"):", ""] + whatif_report(results)
    text = "\n".join(out) + "\n"
    print(text)
    with open(os.path.join(RESULTS, "latest.txt"), "w") as f:
        f.write(text)
    path = os.path.join(RESULTS, f"bench-{stamp}.csv")
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["synchronous_commit", "workload", "clients", "variant", "ops", "txns", "secs",
                    "ops_per_s", "mean_ms", "p99_ms", "wal_record_bytes", "wal_per_op",
                    "fpi_bytes", "fpi_per_op", "distlock_ratio"])
        for passname, g, c, v, cell in csv_rows:
            ref = results.get((passname, g, c, "distlock"))
            ratio = (ref.ops_per_s() / cell.ops_per_s()
                     if ref and cell.ops_per_s() and not v.startswith("distlock") and g != "floor"
                     else "")
            w.writerow([passname, g, c, v, cell.ops, cell.txns, f"{cell.secs:.3f}",
                        f"{cell.ops_per_s():.1f}", f"{cell.mean_ms():.4f}", f"{cell.p99_ms():.4f}",
                        cell.wal, f"{cell.wal_per_op():.1f}", cell.fpi, f"{cell.fpi_per_op():.1f}",
                        f"{ratio:.3f}" if ratio != "" else ""])
    log(f"results: {path} and {os.path.join(RESULTS, 'latest.txt')}")


if __name__ == "__main__":
    main()
