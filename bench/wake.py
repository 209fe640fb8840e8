#!/usr/bin/python3
"""bench/wake.py -- distlock's waiting calls against polling and graphile-worker.

Run by bench/run.sh after bench.py, on the same throwaway cluster, once
without distlock in shared_preload_libraries (waiters re-check every
distlock.wait_poll_interval) and once with it (woken by the committing
transaction); the second run measures only the waiting calls (--only-waiting).
It can also be run by hand against any cluster where bench/setup.sql has
been loaded, with the libpq environment (PGHOST, PGPORT, PGUSER = a
superuser) pointing at it.  It measures and never asserts.

Sections (--rows, comma-separated; all by default):

  latency    wake-up latency of a job: 16 idle workers, jobs enqueued one
             at a time, 20 to 40 ms apart (uniform); from the producer's
             clock right after its enqueue's COMMIT returned to a worker's
             clock right after its claim returned the job (both
             CLOCK_MONOTONIC on this machine), p50 and p99.  graphile-worker
             (its own worker pool, concurrency 16, LISTEN/NOTIFY), distlock
             claim() polled every 100 ms and every 10 ms by each worker
             (their phases spread at random over the interval, so the 16
             together poll 16 times an interval), and claim_wait().  The producer's clock is read after the commit
             is acknowledged, a little after the job became visible, so
             every figure is short by up to one return trip alike.
  lease      a released lease reaching the next of 16 workers that want
             it: each holds it 20 to 40 ms, releases it and asks again;
             from the releaser's clock after release() returned to the
             next holder's after its grant returned.  acquire() (FIFO
             waiters), and try_acquire() polled every 100 and 10 ms (a
             worker that released waits one interval before it polls again).
  idle       CPU time of the server's processes (utime + stime from
             /proc/<pid>/stat of every pid in pg_stat_activity but ours)
             over WAKE_IDLE_SECS with 16 and 200 idle workers and no work:
             claim_wait() with a 60 s wait, claim() polled every 100 and
             10 ms (pgbench clients, "\\sleep" between claims), and
             graphile-worker at that concurrency; % of one core.
  throughput claim_wait + complete against claim + complete with the queue
             full, pgbench as bench.py runs it (1 and 16 clients), both in
             each run, so that each ratio is taken on one server.
  retention  RETENTION_JOBS jobs (1,000,000; QUICK 100,000) through a queue,
             each enqueued, claimed and completed by 4 pgbench clients, with
             distlock.job_retention at 60 s (QUICK: 10 s) and autovacuum on;
             size of distlock.jobs (table + indexes) and the claim's mean
             latency after the first 10 % and over the last 10 %.  Without
             the preload (no background worker) a thread calls
             distlock.maintain() every second, and again at once while it
             prunes a full batch, as the background worker does.

Every section runs with synchronous_commit on (ALTER SYSTEM, restored
after), as e2e.py's do, whatever bench.py's last pass left.

Results go to a state file (--state, default $BENCH_WORK/wake.json) that
successive runs add to; --report prints the tables, appends them to
bench/results/latest.txt and writes bench/results/wake-<time>.csv.

Environment: QUICK=1, WAKE_JOBS (jobs or handovers per latency row: 1000,
QUICK 300), WAKE_IDLE_SECS (10, QUICK 5), WAKE_IDLE_WORKERS ("16 200"),
WAKE_TP_CLIENTS ("1 16"), RETENTION_JOBS, RETENTION_SECS, GRAPHILE_DIR
(bench/graphile/install.sh's directory; unset or empty leaves
graphile-worker's rows out), and bench.py's ROUNDS and ROUND_SECS.
"""

import argparse
import csv
import datetime
import json
import math
import os
import random
import re
import subprocess
import sys
import threading
import time

import psycopg

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import bench  # noqa: E402  (Db, pgbench rounds and fills are shared)

QUICK = bench.QUICK
WORK = bench.WORK
N_EVENTS = int(os.environ.get("WAKE_JOBS", "300" if QUICK else "1000"))
IDLE_SECS = float(os.environ.get("WAKE_IDLE_SECS", "5" if QUICK else "10"))
IDLE_WORKERS = [int(n) for n in os.environ.get("WAKE_IDLE_WORKERS", "16 200").split()]
TP_CLIENTS = [int(n) for n in os.environ.get("WAKE_TP_CLIENTS", "1 16").split()]
RET_JOBS = int(os.environ.get("RETENTION_JOBS", "100000" if QUICK else "1000000"))
RET_SECS = int(os.environ.get("RETENTION_SECS", "10" if QUICK else "60"))
RET_CLIENTS = 4
GRAPHILE_DIR = os.environ.get("GRAPHILE_DIR", "")
WORKERS = 16
SPACING_MS = (20, 40)
HOLD_MS = (20, 40)
LONG_WAIT = "60 seconds"
SYNC = "on"

log = bench.log


# --- what the server has --------------------------------------------------

class Server:
    """What the cluster offers: the waiting procedures, the preload, the
    retention setting."""

    def __init__(self, db, mode):
        self.procs = {r[0] for r in db.run(
            "SELECT proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE nspname = 'distlock'")}
        self.waiting = {"claim_wait", "acquire"} <= self.procs
        preloaded = "distlock" in re.split(r"[,\s]+", db.one("SHOW shared_preload_libraries"))
        self.preload = preloaded if mode == "auto" else mode == "preload"
        if self.preload != preloaded:
            log(f"warning: --mode {mode}, but distlock is{'' if preloaded else ' not'}"
                " in shared_preload_libraries")
        db.run("LOAD 'distlock'")
        settings = dict(db.run("SELECT name, setting FROM pg_settings WHERE name LIKE 'distlock.%'"))
        self.poll_ms = settings.get("distlock.wait_poll_interval")
        self.retention = "distlock.job_retention" in settings

    def wait_label(self):
        if self.preload:
            return "woken at commit (preload)"
        return f"re-checks every {self.poll_ms or '?'} ms (no preload)"


def connect(app, user="app"):
    return psycopg.connect(dbname="postgres", user=user, autocommit=True, application_name=app)


def mono_ms():
    return time.monotonic_ns() / 1e6


def stats(values):
    """(n, p50, p99, max, mean) of values in ms, nearest-rank percentiles."""
    if not values:
        return (0, None, None, None, None)
    s = sorted(values)

    def pct(p):
        return s[min(len(s) - 1, max(0, int(math.ceil(p * len(s))) - 1))]
    return (len(s), pct(0.50), pct(0.99), s[-1], sum(s) / len(s))


def terminate(db, app):
    """End our worker backends of application_name app, and wait until
    they are gone."""
    db.run("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
           (app,))
    for _ in range(100):
        if not db.one("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,)):
            return
        time.sleep(0.05)


def wait_for_backends(db, app, n, timeout=30):
    for _ in range(int(timeout * 20)):
        if db.one("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                  (app,)) >= n:
            return True
        time.sleep(0.05)
    return False


# --- distlock workers (threads, one connection each) ------------------------

class Worker(threading.Thread):
    """A distlock worker on a connection of its own, as role app.

    kind "poll": claim(), and when it finds nothing sleep interval ms;
    kind "wait": claim_wait() for wait_for; either completes each job at
    once.  Each job's start (the claim's return) goes to starts[seq]."""

    APP = "wake-worker"

    def __init__(self, n, kind, queue, starts, interval=None, wait_for="5 seconds"):
        super().__init__(daemon=True)
        self.n, self.kind, self.queue, self.starts = n, kind, queue, starts
        self.interval, self.wait_for = interval, wait_for
        self.stop = False
        self.calls = 0
        self.ready = threading.Event()
        self.error = None

    def run(self):
        try:
            with connect(self.APP) as conn:
                sid = conn.execute("SELECT distlock.session_open('1 hour', %s)",
                                   (f"wake-{self.n}",)).fetchone()[0]
                self.ready.set()
                if self.kind == "poll":
                    # workers started one by one poll at phases spread
                    # over the interval, not in step
                    time.sleep(random.Random(self.n).uniform(0, self.interval) / 1000)
                while not self.stop:
                    self.calls += 1
                    if self.kind == "poll":
                        jobs = conn.execute("SELECT id, payload FROM distlock.claim(%s, %s, 1)",
                                            (self.queue, sid), prepare=True).fetchall()
                    else:
                        arr = conn.execute(
                            "CALL distlock.claim_wait(%s, %s, 1, %s::interval, NULL)",
                            (self.queue, sid, self.wait_for)).fetchone()[0]
                        jobs = [(j["id"], j["payload"]) for j in arr or []]
                    now = mono_ms()
                    for jid, payload in jobs:
                        self.starts[payload["seq"]] = now
                        conn.execute("SELECT distlock.complete(%s, %s)", (jid, sid), prepare=True)
                    if not jobs and self.kind == "poll":
                        time.sleep(self.interval / 1000)
        except psycopg.OperationalError as e:
            if not self.stop:
                self.error = e
        except Exception as e:  # noqa: BLE001 -- reported by the caller
            self.error = e
        finally:
            self.ready.set()


def start_workers(n, make):
    ws = [make(i) for i in range(n)]
    for w in ws:
        w.start()
    for w in ws:
        w.ready.wait(60)
    errors = [w.error for w in ws if w.error]
    if errors:
        raise RuntimeError(f"worker failed: {errors[0]}")
    return ws


def stop_workers(db, ws, app=Worker.APP):
    for w in ws:
        w.stop = True
    terminate(db, app)
    for w in ws:
        w.join(10)


# --- graphile-worker --------------------------------------------------------

def graphile_node(script, *args, **popen):
    """Start bench/graphile/<script> under install.sh's Node, as the
    superuser, with the node_modules directory as its first argument."""
    modules = os.path.join(GRAPHILE_DIR, "node_modules")
    env = dict(os.environ, PGUSER="postgres", PGDATABASE="postgres")
    return subprocess.Popen([os.path.join(modules, ".bin", "node"),
                             os.path.join(BENCH, "graphile", script), modules, *args],
                            text=True, env=env, **popen)


class Graphile:
    """graphile-worker's worker pool in a Node process (bench/graphile):
    worker.mjs, or script with args after the concurrency."""

    def __init__(self, concurrency, starts, script="worker.mjs", args=()):
        self.starts = starts
        self.handled = None
        self.proc = graphile_node(script, str(concurrency), *args, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE)
        self.ready = threading.Event()
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()
        if not self.ready.wait(60):
            self.close()
            raise RuntimeError("graphile-worker did not start")

    def read(self):
        for line in self.proc.stdout:
            parts = line.split()
            if parts[:1] == ["ready"]:
                self.ready.set()
            elif parts[:1] == ["start"] and len(parts) == 3:
                self.starts[int(parts[1])] = int(parts[2]) / 1e6
            elif parts[:1] == ["handled"] and len(parts) == 2:
                self.handled = int(parts[1])
        self.ready.set()

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                self.proc.wait(10)
        self.reader.join(5)


# --- latency: jobs ----------------------------------------------------------

def produce(conn, sql, n, starts):
    """Enqueue jobs seq 0..n-1 one at a time, SPACING_MS apart; returns
    {seq: time the enqueue's commit returned}.  Waits for every job to start
    (at most 10 s after the last)."""
    committed = {}
    rng = random.Random(5)
    for seq in range(n):
        time.sleep(rng.uniform(*SPACING_MS) / 1000)
        conn.execute(sql, (seq,), prepare=True)
        committed[seq] = mono_ms()
    deadline = time.monotonic() + 10
    while len(starts) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    return committed


def latencies(committed, starts):
    lat = [starts[s] - committed[s] for s in committed if s in starts]
    return lat, len(committed) - len(lat)


def job_latency(db, srv, only_waiting):
    rows = []
    variants = []
    if not only_waiting:
        if GRAPHILE_DIR:
            variants.append(("graphile-worker (LISTEN/NOTIFY)", "graphile", None))
        variants += [("distlock claim, polled every 100 ms", "poll", 100),
                     ("distlock claim, polled every 10 ms", "poll", 10)]
    if srv.waiting:
        variants.append((f"distlock claim_wait, {srv.wait_label()}", "wait", None))
    for name, kind, interval in variants:
        starts = {}
        db.run("TRUNCATE distlock.jobs")
        producer_user = "postgres" if kind == "graphile" else "app"
        with connect("wake-producer", producer_user) as prod:
            if kind == "graphile":
                gw = Graphile(WORKERS, starts)
                time.sleep(1)
                sql = "SELECT graphile_worker.add_job('wake', json_build_object('seq', %s))"
            else:
                ws = start_workers(WORKERS, lambda i: Worker(i, kind, "wake", starts, interval))
                time.sleep(1)
                sql = "SELECT distlock.enqueue('wake', jsonb_build_object('seq', %s))"
            t0 = time.monotonic()
            try:
                committed = produce(prod, sql, N_EVENTS, starts)
            finally:
                if kind == "graphile":
                    gw.close()
                else:
                    stop_workers(db, ws)
            secs = time.monotonic() - t0
        lat, lost = latencies(committed, starts)
        n, p50, p99, mx, mean = stats(lat)
        log(f"  latency {name:60} p50 {p50:7.2f} ms  p99 {p99:7.2f} ms  max {mx:7.2f} ms"
            f"  ({n} jobs, {lost} not started, {secs:.0f} s)")
        rows.append(dict(section="latency", variant=name, workers=WORKERS, n=n, lost=lost,
                         p50_ms=p50, p99_ms=p99, max_ms=mx, mean_ms=mean))
    return rows


# --- latency: a lease -------------------------------------------------------

class LeaseWorker(threading.Thread):
    """One of the workers that want lease NAME: get it (acquire(), or
    try_acquire() every interval ms), hold it HOLD_MS, release it, again;
    all of them start once go is set, when every one has connected, so
    that no handover waits for a worker still connecting."""

    APP = "wake-lease"
    NAME = "wake-lease"

    def __init__(self, n, kind, interval, grants, releases, enough, go):
        super().__init__(daemon=True)
        self.n, self.kind, self.interval = n, kind, interval
        self.grants, self.releases, self.enough = grants, releases, enough
        self.go = go
        self.stop = False
        self.ready = threading.Event()
        self.error = None
        self.rng = random.Random(n)

    def run(self):
        owner = f"w{self.n}"
        try:
            with connect(self.APP) as conn:
                self.ready.set()
                self.go.wait(60)
                if self.kind == "poll":
                    time.sleep(self.rng.uniform(0, self.interval) / 1000)
                while not self.stop and not self.enough.is_set():
                    if self.kind == "wait":
                        token = conn.execute(
                            "CALL distlock.acquire(%s, %s, '30 seconds', NULL, NULL,"
                            " '30 seconds', NULL)", (self.NAME, owner)).fetchone()[0]
                    else:
                        token = conn.execute("SELECT distlock.try_acquire(%s, %s, '30 seconds')",
                                             (self.NAME, owner), prepare=True).fetchone()[0]
                    if token is None:
                        if self.kind == "poll":
                            time.sleep(self.interval / 1000)
                        continue
                    self.grants.append((token, mono_ms()))
                    time.sleep(self.rng.uniform(*HOLD_MS) / 1000)
                    conn.execute("SELECT distlock.release(%s, %s)", (self.NAME, owner),
                                 prepare=True)
                    self.releases[token] = mono_ms()
                    if len(self.grants) > N_EVENTS:
                        self.enough.set()
                    if self.kind == "poll":
                        time.sleep(self.interval / 1000)
        except psycopg.OperationalError as e:
            if not self.stop:
                self.error = e
        except Exception as e:  # noqa: BLE001
            self.error = e
        finally:
            self.ready.set()


def lease_latency(db, srv, only_waiting):
    rows = []
    variants = []
    if not only_waiting:
        variants += [("distlock try_acquire, polled every 100 ms", "poll", 100),
                     ("distlock try_acquire, polled every 10 ms", "poll", 10)]
    if srv.waiting:
        variants.append((f"distlock acquire, {srv.wait_label()}", "wait", None))
    for name, kind, interval in variants:
        db.run("DELETE FROM distlock.locks WHERE name = %s", (LeaseWorker.NAME,))
        grants, releases, enough, go = [], {}, threading.Event(), threading.Event()
        ws = start_workers(WORKERS, lambda i: LeaseWorker(i, kind, interval, grants, releases,
                                                          enough, go))
        t0 = time.monotonic()
        go.set()
        enough.wait(N_EVENTS * 0.2 + 30)
        stop_workers(db, ws, LeaseWorker.APP)
        secs = time.monotonic() - t0
        errors = [w.error for w in ws if w.error]
        if errors:
            log(f"  lease {name}: a worker failed: {errors[0]}")
        # the first grant follows no release; each later one follows the
        # release of the grant before it
        order = sorted(grants)
        lat = [t - releases[prev] for (prev, _), (_, t) in zip(order, order[1:])
               if prev in releases]
        n, p50, p99, mx, mean = stats(lat)
        if not n:
            log(f"  lease {name}: no handovers")
            continue
        log(f"  lease   {name:60} p50 {p50:7.2f} ms  p99 {p99:7.2f} ms  max {mx:7.2f} ms"
            f"  ({n} handovers, {secs:.0f} s)")
        rows.append(dict(section="lease", variant=name, workers=WORKERS, n=n, lost=0,
                         p50_ms=p50, p99_ms=p99, max_ms=mx, mean_ms=mean))
    return rows


# --- idle cost --------------------------------------------------------------

CLK_TCK = os.sysconf("SC_CLK_TCK")


def server_cpu(db):
    """{pid: (CPU ns from /proc/<pid>/schedstat, utime + stime ticks from
    /proc/<pid>/stat)} of every process in pg_stat_activity but this
    connection's.

    The ticks are what the brief of these rows named, but the kernel
    charges a tick to whatever runs when the timer fires: a backend woken
    by a client that sleeps whole ticks (pgbench's 10 ms \\sleep) runs just
    after a tick and is done before the next, and is charged almost nothing.
    schedstat's figure is the scheduler's own count of time on the CPU, in
    ns; the rows use it, and show the ticks beside it."""
    out = {}
    for (pid,) in db.run("SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid()"):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/schedstat") as f:
                ns = int(f.read().split()[0])
            out[pid] = (ns, int(fields[11]) + int(fields[12]))
        except (OSError, IndexError, ValueError):
            pass
    return out


def measure_idle(db, secs):
    """% of one core the server's processes used over secs, by schedstat
    and by ticks, and how many processes were measured."""
    time.sleep(1)
    a = server_cpu(db)
    t0 = time.monotonic()
    time.sleep(secs)
    b = server_cpu(db)
    elapsed = time.monotonic() - t0
    ns = sum(b[p][0] - a[p][0] for p in b if p in a)
    ticks = sum(b[p][1] - a[p][1] for p in b if p in a)
    return 100.0 * ns / 1e9 / elapsed, 100.0 * ticks / CLK_TCK / elapsed, len(a)


def idle_cost(db, srv, only_waiting):
    rows = []
    db.run("TRUNCATE distlock.jobs")
    max_conn = int(db.one("SHOW max_connections"))
    for n in IDLE_WORKERS:
        if n + 10 > max_conn:
            log(f"  idle: {n} workers need max_connections above {n + 10} ({max_conn}); left out")
            continue
        variants = []
        if not only_waiting:
            if GRAPHILE_DIR:
                variants.append(("graphile-worker (LISTEN/NOTIFY, polls every 2 s)", "graphile",
                                 None))
            variants += [("distlock claim, polled every 100 ms", "poll", 100),
                         ("distlock claim, polled every 10 ms", "poll", 10)]
        if srv.waiting:
            variants.append((f"distlock claim_wait ({LONG_WAIT}), {srv.wait_label()}", "wait",
                             None))
        for name, kind, interval in variants:
            calls = ""
            if kind == "graphile":
                gw = Graphile(n, {})
                try:
                    pct, tick_pct, procs = measure_idle(db, IDLE_SECS)
                finally:
                    gw.close()
            elif kind == "wait":
                ws = start_workers(n, lambda i: Worker(i, "wait", "idle", {}, wait_for=LONG_WAIT))
                try:
                    pct, tick_pct, procs = measure_idle(db, IDLE_SECS)
                finally:
                    stop_workers(db, ws)
            else:
                p = subprocess.Popen(
                    ["pgbench", "-n", "-M", "prepared", "-U", "app",
                     "-c", str(n), "-j", "2", "-T", str(int(IDLE_SECS + 4)),
                     "-D", f"interval={interval}", "-D", "have_sid=0",
                     "-f", os.path.join(BENCH, "idle_poll.sql"), "postgres"],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                    env=dict(os.environ, PGAPPNAME="wake-idle"))
                wait_for_backends(db, "wake-idle", n)
                pct, tick_pct, procs = measure_idle(db, IDLE_SECS)
                out, err = p.communicate()
                m = re.search(r"tps = ([\d.]+) \(without", out)
                if p.returncode != 0 or not m:
                    log(f"  idle {name}: pgbench failed: {err.strip()[-300:]}")
                    continue
                calls = float(m.group(1))
            log(f"  idle    {name:60} {n:3} workers: {pct:6.1f} % of a core ({tick_pct:.1f} by ticks)"
                f"{f', {calls:,.0f} claims/s' if calls else ''}")
            rows.append(dict(section="idle", variant=name, workers=n, cpu_pct=pct, tick_pct=tick_pct,
                             processes=procs, calls_per_s=calls))
    return rows


# --- throughput -------------------------------------------------------------

def throughput(db, srv, only_waiting):
    if not srv.waiting:
        log("  throughput: claim_wait is not installed; left out")
        return []
    counter = bench.jobs_counter("distlock.jobs")
    d = {"batch": 1, "have_sid": 0, "jid": 0}
    variants = [bench.Variant(f"claim_wait + complete, {srv.wait_label()}",
                              "job_distlock_wait.sql", "distlock", d, bench.prep_distlock_jobs,
                              counter, fill_rate=5000)]
    # The polling loop on the same server in both runs: compared with the
    # other run's, the preloaded claim_wait would be judged against a
    # server started afresh, and differences between the two runs taken
    # for the call's cost.
    variants.append(bench.Variant(
        "claim + complete (polling loop), "
        + ("preloaded" if srv.preload else "not preloaded"),
        "job_distlock.sql", "distlock", d, bench.prep_distlock_jobs, counter,
        fill_rate=5000))
    rows = []
    cells = {}
    for c in TP_CLIENTS:
        for rnd in range(bench.ROUNDS):
            order = variants if rnd % 2 == 0 else variants[::-1]
            for v in order:
                ops, txns, secs, wal, lat = bench.run_round(db, v, c, 5000, f"wake_tp_{c}")
                cell = cells.setdefault((v.name, c), bench.Cell())
                cell.add(ops, txns, secs, wal, lat)
                log(f"  throughput c={c:<2} r{rnd + 1} {v.name:50} {ops / secs:8.0f} jobs/s")
    for (name, c), cell in cells.items():
        rows.append(dict(section="throughput", variant=name, workers=c,
                         jobs_per_s=cell.ops_per_s(), mean_ms=cell.mean_ms(),
                         p99_ms=cell.p99_ms(), wal_per_job=cell.wal_per_op()))
    return rows


# --- retention --------------------------------------------------------------

def retention(db, srv, only_waiting):
    if not srv.retention:
        log("  retention: distlock.job_retention does not exist; left out")
        return []
    maintain = "maintain" in srv.procs and not srv.preload
    if not srv.preload and not maintain:
        log("  retention: no preload and no distlock.maintain(); left out")
        return []
    db.run("TRUNCATE distlock.jobs")
    db.run(f"ALTER SYSTEM SET distlock.job_retention = {RET_SECS}")
    db.run("ALTER SYSTEM SET autovacuum = on")
    db.run("SELECT pg_reload_conf()")
    stop = threading.Event()

    def maintainer():
        # as the background worker does: a pass a second, and the next at
        # once while a pass pruned a full batch
        with connect("wake-maintain", "postgres") as conn:
            while not stop.wait(1):
                while not stop.is_set() and conn.execute(
                        "SELECT jobs_pruned FROM distlock.maintain()").fetchone()[0] >= 1000:
                    pass

    mt = threading.Thread(target=maintainer, daemon=True)
    if maintain:
        mt.start()
    rows = []
    how = "background worker" if srv.preload else "maintain() every second"
    try:
        done = 0
        tenth = RET_JOBS // 10
        for phase, jobs in (("first 10 %", tenth), (None, RET_JOBS - 2 * tenth),
                            ("last 10 %", tenth)):
            per_client = max(1, jobs // RET_CLIENTS)
            t0 = time.monotonic()
            p = subprocess.run(
                ["pgbench", "-n", "-M", "prepared", "-U", "app", "-r",
                 "-c", str(RET_CLIENTS), "-j", "2", "-t", str(per_client), "-D", "have_sid=0",
                 "-f", os.path.join(BENCH, "job_retention.sql"), "postgres"],
                capture_output=True, text=True)
            secs = time.monotonic() - t0
            if p.returncode != 0:
                log(f"  retention: pgbench failed: {p.stderr.strip()[-300:]}")
                return rows
            done += per_client * RET_CLIENTS
            claim_ms = None
            for line in p.stdout.splitlines():
                if "distlock.claim(" in line:
                    claim_ms = float(line.split()[0])
            size = db.one("SELECT pg_total_relation_size('distlock.jobs')")
            count = db.one("SELECT count(*) FROM distlock.jobs")
            log(f"  retention after {done:,} jobs ({secs:.0f} s): distlock.jobs "
                f"{size / 2**20:,.1f} MB, {count:,} rows; claim {claim_ms} ms")
            if phase:
                rows.append(dict(section="retention", variant=f"after {done:,} jobs ({phase})",
                                 workers=RET_CLIENTS, size_mb=size / 2**20, rows=count,
                                 claim_ms=claim_ms, retention_s=RET_SECS, pruned_by=how))
    finally:
        stop.set()
        if maintain:
            mt.join(30)
        db.run("ALTER SYSTEM RESET distlock.job_retention")
        db.run("ALTER SYSTEM RESET autovacuum")
        db.run("SELECT pg_reload_conf()")
    return rows


SECTIONS = {"latency": job_latency, "lease": lease_latency, "idle": idle_cost,
            "throughput": throughput, "retention": retention}


# --- report -----------------------------------------------------------------

def fmt(x, spec=".2f"):
    return "" if x is None or x == "" else format(x, spec)


def report(rows):
    out = ["Waiting calls (bench/wake.py): wake-up latency, idle cost, throughput, retention", ""]
    sec = [r for r in rows if r["section"] == "latency"]
    if sec:
        out += [f"Job wake-up latency: {WORKERS} idle workers, one job every 20-40 ms; from the"
                " producer's clock after its enqueue's COMMIT returned to a worker's after its"
                " claim returned the job.", "",
                "| variant | jobs | p50 ms | p99 ms | max ms | not started |",
                "| --- | ---: | ---: | ---: | ---: | ---: |"]
        out += [f"| {r['variant']} | {r['n']} | {fmt(r['p50_ms'])} | {fmt(r['p99_ms'])} | "
                f"{fmt(r['max_ms'])} | {r['lost']} |" for r in sec] + [""]
    sec = [r for r in rows if r["section"] == "lease"]
    if sec:
        out += [f"Lease handover: {WORKERS} workers want one lease, each holds it 20-40 ms; from the"
                " releaser's clock after release() returned to the next holder's after its grant"
                " returned.", "",
                "| variant | handovers | p50 ms | p99 ms | max ms |",
                "| --- | ---: | ---: | ---: | ---: |"]
        out += [f"| {r['variant']} | {r['n']} | {fmt(r['p50_ms'])} | {fmt(r['p99_ms'])} | "
                f"{fmt(r['max_ms'])} |" for r in sec] + [""]
    sec = [r for r in rows if r["section"] == "idle"]
    if sec:
        out += ["Idle cost: CPU of the server's processes (every pid in pg_stat_activity;"
                " time on the CPU from /proc/<pid>/schedstat, and utime + stime ticks, which"
                " miss short runs that start just after a tick) with idle workers and no"
                " work, % of one core.", "",
                "| variant | workers | server CPU % | by ticks | claims/s |",
                "| --- | ---: | ---: | ---: | ---: |"]
        out += [f"| {r['variant']} | {r['workers']} | {fmt(r['cpu_pct'], '.1f')} | "
                f"{fmt(r['tick_pct'], '.1f')} | "
                f"{fmt(r['calls_per_s'], ',.0f')} |" for r in sec] + [""]
    sec = [r for r in rows if r["section"] == "throughput"]
    if sec:
        out += [f"Job cycle with the queue full (pgbench, -M prepared, synchronous_commit {SYNC}).", "",
                "| variant | clients | jobs/s | mean ms | p99 ms | WAL B/job |",
                "| --- | ---: | ---: | ---: | ---: | ---: |"]
        out += [f"| {r['variant']} | {r['workers']} | {fmt(r['jobs_per_s'], ',.0f')} | "
                f"{fmt(r['mean_ms'], '.3f')} | {fmt(r['p99_ms'], '.3f')} | "
                f"{fmt(r['wal_per_job'], ',.0f')} |" for r in sec] + [""]
    sec = [r for r in rows if r["section"] == "retention"]
    if sec:
        out += [f"Retention: jobs enqueued, claimed and completed by {RET_CLIENTS} clients,"
                " distlock.job_retention set, autovacuum on.", "",
                "| point | retention s | pruned by | distlock.jobs MB | rows | claim mean ms |",
                "| --- | ---: | --- | ---: | ---: | ---: |"]
        out += [f"| {r['variant']} | {r['retention_s']} | {r['pruned_by']} | "
                f"{fmt(r['size_mb'], ',.1f')} | {r['rows']:,} | {fmt(r['claim_ms'], '.3f')} |"
                for r in sec] + [""]
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=("auto", "poll", "preload"), default="auto",
                    help="the server's wake-up mode (auto: from shared_preload_libraries)")
    ap.add_argument("--rows", default=",".join(SECTIONS),
                    help="sections to run: " + ",".join(SECTIONS))
    ap.add_argument("--only-waiting", action="store_true",
                    help="only the rows of the waiting calls (for a second run with the preload)")
    ap.add_argument("--state", default=os.path.join(WORK, "wake.json"))
    ap.add_argument("--report", action="store_true",
                    help="print the tables of the state file, append them to"
                         " results/latest.txt and write results/wake-<time>.csv")
    args = ap.parse_args()

    rows = []
    if os.path.exists(args.state):
        with open(args.state) as f:
            rows = json.load(f)
    sections = [s for s in args.rows.split(",") if s]
    if sections and sections != ["none"]:
        db = bench.Db()
        srv = Server(db, args.mode)
        log(f"== waiting calls, {srv.wait_label()}, synchronous_commit {SYNC}"
            f"{'' if srv.waiting else ': claim_wait/acquire not installed, their rows left out'}")
        # as e2e.py: the enqueues and acknowledgements commit synchronously,
        # as an application's would, whatever the cluster was left with
        with bench.synchronous_commit(db, SYNC):
            for s in sections:
                if s not in SECTIONS:
                    raise SystemExit(f"unknown section {s}")
                rows += SECTIONS[s](db, srv, args.only_waiting)
                with open(args.state, "w") as f:
                    json.dump(rows, f)
    if args.report:
        text = report(rows)
        print(text)
        os.makedirs(bench.RESULTS, exist_ok=True)
        with open(os.path.join(bench.RESULTS, "latest.txt"), "a") as f:
            f.write("\n" + text)
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = os.path.join(bench.RESULTS, f"wake-{stamp}.csv")
        keys = []
        for r in rows:
            keys += [k for k in r if k not in keys]
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)
        log(f"results: {path}")


if __name__ == "__main__":
    main()
