#!/usr/bin/python3
"""test/fault/workload.py -- load generator and fault injector for distlock.

    workload.py run --scenario NAME --dir DIR --port PORT --cluster-dir CDIR
                    [--pool-port PORT] [--seed N] [--soak] [--path direct|sql]
    workload.py advisory --port PORT --pool-port PORT [--seed N]

"run" drives one scenario of the fault-injection suite against a throwaway
cluster that test/fault/run.sh started (wal_level = logical, pg_stat_statements
preloaded with track = all): it installs distlock and the harness's own
objects (setup.sql, nothing on distlock's tables), creates the logical
replication slot "fault" (test_decoding) before the first row is written,
starts lock clients and queue workers as separate processes (the workers
acknowledge each job with complete(), or, for a third of their claims, the
claim's jobs together with one complete_batch(), or with one
complete_batch_and_claim() that claims their next jobs too), injects faults
while they run (pg_terminate_backend of client backends, SIGSTOP of lease
holders and job holders beyond their ttl then SIGCONT, SIGKILL of clients,
immediate-stop restarts of the server, SIGKILL of a backend), stops them,
and exports the server's side of the history.  Everything lands in DIR as
JSON lines for checker.py:

    ops-*.jsonl     one line per client operation ("op"), and before each
                    COMMIT a "pre" line with the transaction id, so that an
                    operation cut short by a kill can still be resolved
    faults.jsonl    every fault injected
    wal.jsonl       the slot's changes of distlock's tables and the commit
                    records, as test_decoding printed them ({lsn, xid,
                    data}; checker.py parses them)
    pgss.jsonl      samples of pg_stat_statements' counts of distlock's
                    nested statements: which path claims and
                    acknowledgements took
    writes.jsonl    accepted fenced writes; effects.jsonl queue effects
    jobs.jsonl, locks.jsonl, sessions.jsonl
                    the final state of distlock's tables
    xact.jsonl      pg_xact_status() and commit time of every transaction id
                    a client saw
    meta.json       scenario, seed, parameters, fault floors, liveness,
                    settings, and what could divert the queue's path

The slot is created before the workload and read only at the end, with
pg_logical_slot_peek_changes(): a slot survives crashes (its state is on
disk, and it keeps the WAL from its restart_lsn on), and nothing is
consumed, so no change is lost to an immediate restart or to a failed read.

--path sql says the cluster runs with distlock.direct_path = off (run.sh
puts it in postgresql.conf) and picks the scenario's smaller numbers for
that run; the checker then expects the SQL statements to have run.
--delete-completed says it runs with distlock.delete_completed = on, so that every
acknowledgement deletes its job, and picks the same smaller numbers; the
checker then expects every completion to be a deletion.

Every client operation is one transaction whose first statement returns
pg_current_xact_id(), the server clock before the call (t0), the call's
result, and the server clock after it (t1), all in one SELECT.

"advisory" measures, through PgBouncer in transaction pooling mode, what
happens to session-level advisory locks and to distlock leases.

Clients run on the Debian interpreter (/usr/bin/python3) with psycopg 3.
"""

import argparse
import datetime
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import psycopg

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
QUEUE = "fault-q"

# ---------------------------------------------------------------------------
# Scenarios.  Gate numbers run inside "make test"; soak numbers (--soak,
# SOAK=1) run the same harness longer and bigger.  Periods are seconds
# between two faults of a kind; floors are the minimum count of each fault
# (and of the events the faults must cause) for the run to count.
# ---------------------------------------------------------------------------

SCENARIOS = {
    # D1: lease safety.  16 clients on 4 hot names, ttl 200-2000 ms.
    "d1": {
        "title": "D1 locks under faults",
        "gate": dict(lock_clients=16, names=4, duration=32,
                     term=0.25, kill=3.0, pause=3.0, restarts=[0.5],
                     floors=dict(term=80, term_seen=30, kill=6, pause_outlived=5,
                                 restart=1, grants=150, takeovers=30,
                                 zombie_takeovers=3, zombie_refused=3)),
        "soak": dict(lock_clients=32, names=4, duration=150,
                     term=0.25, kill=3.0, pause=3.0, restarts=[0.3, 0.7],
                     floors=dict(term=400, term_seen=150, kill=30, pause_outlived=25,
                                 restart=2, grants=800, takeovers=150,
                                 zombie_takeovers=10, zombie_refused=10)),
    },
    # D2: exactly-once acknowledgement.  Jobs through workers with 1 s
    # sessions heartbeating every 250 ms; one immediate restart at 50%.
    # A queue run ends when its jobs are done, so it lasts as long as the
    # queue is slow: pauses come every 2 s, or a faster queue (the gate's
    # run went from 26 s to 22 s with complete_batch_and_claim) pauses too
    # few workers to meet the floor of pauses that outlive their session.
    "d2": {
        "title": "D2 queue under faults",
        "gate": dict(workers=8, jobs=20000, term=1.0, kill=2.0, pause=2.0,
                     restart_progress=[0.5], fault_until_progress=0.9,
                     max_time=150,
                     floors=dict(term=10, kill=6, pause_outlived=3, restart=1,
                                 zombie_acks=1, redeliveries=100)),
        "soak": dict(workers=16, jobs=120000, term=1.0, kill=2.0, pause=2.0,
                     restart_progress=[0.25, 0.5, 0.75], fault_until_progress=0.95,
                     drain_s=60, max_time=400,
                     floors=dict(term=60, kill=40, pause_outlived=20, restart=3,
                                 zombie_acks=5, redeliveries=500)),
        # The same on the SQL path (distlock.direct_path = off), smaller:
        # the gate's second run, and the soak's at the gate's size.
        "gate_sql": dict(workers=8, jobs=8000, term=1.0, kill=2.0, pause=2.0,
                         restart_progress=[0.5], fault_until_progress=0.9,
                         max_time=100,
                         floors=dict(term=5, kill=3, pause_outlived=1, restart=1,
                                     zombie_acks=1, redeliveries=30)),
        "soak_sql": dict(workers=8, jobs=20000, term=1.0, kill=2.0, pause=2.0,
                         restart_progress=[0.5], fault_until_progress=0.9,
                         max_time=150,
                         floors=dict(term=10, kill=6, pause_outlived=3, restart=1,
                                     zombie_acks=1, redeliveries=100)),
    },
    # D4: crash cycles.  Both workloads at a quarter of the scale; at the end
    # of every cycle an immediate stop, a downtime longer than every ttl,
    # and a start.
    "d4": {
        "title": "D4 crash cycles",
        "gate": dict(lock_clients=4, names=4, workers=2, jobs=3000,
                     cycles=4, cycle_s=7, downtime_s=2.5, max_time=150,
                     floors=dict(restart=4, grants=60, zombie_acks=1)),
        "soak": dict(lock_clients=8, names=16, workers=4, jobs=25000,
                     cycles=12, cycle_s=12, downtime_s=2.5, max_time=400,
                     floors=dict(restart=12, grants=500, zombie_acks=3)),
    },
    # Pool hop: both workloads through PgBouncer in transaction pooling mode,
    # with backend terminations, client pauses and kills, and one server
    # crash-restart (SIGKILL of a backend).
    "pool": {
        "title": "pool hop through PgBouncer (transaction mode)",
        "gate": dict(pool=True, lock_clients=8, names=4, workers=4, jobs=8000,
                     duration=30, term=0.5, kill=3.0, pause=3.0, crashes=[0.5],
                     max_time=150,
                     floors=dict(term=40, kill=6, pause_outlived=4, crash=1,
                                 grants=120, takeovers=20, zombie_acks=1,
                                 redeliveries=20)),
        "soak": dict(pool=True, lock_clients=16, names=8, workers=8, jobs=30000,
                     duration=150, term=0.5, kill=3.0, pause=3.0,
                     crashes=[0.3, 0.7], drain_s=60, max_time=400,
                     floors=dict(term=200, kill=30, pause_outlived=20, crash=2,
                                 grants=1000, takeovers=100, zombie_acks=3,
                                 redeliveries=100)),
        # On the SQL path: half the gate's time (soak: the gate's numbers),
        # a pause every 2 s: its 4,000 jobs are done in about 11 s.
        "gate_sql": dict(pool=True, lock_clients=8, names=4, workers=4, jobs=4000,
                         duration=15, term=0.5, kill=3.0, pause=2.0, crashes=[0.5],
                         max_time=100,
                         floors=dict(term=20, kill=3, pause_outlived=2, crash=1,
                                     grants=60, takeovers=10, zombie_acks=1,
                                     redeliveries=10)),
    },
}
# The pool hop's soak on the SQL path runs the gate's numbers.
SCENARIOS["pool"]["soak_sql"] = SCENARIOS["pool"]["gate"]

LOCK_TTL_MS = (200, 2000)       # lease ttl, uniform
SESSION_TTL_S = 1.0             # queue workers' session ttl
HEARTBEAT_S = 0.25              # heartbeat interval
REAP_S = 0.5                    # harness reaper interval
WORK_MS = (0, 10)               # a job's work
BATCH_SHARE = 1 / 3             # claims acknowledged with one complete_batch()
BATCH_CLAIM_SHARE = 1 / 3       # of those batches: complete_batch_and_claim()
PAUSE_JOB_S = 2.0               # SIGSTOP of a worker: > SESSION_TTL_S
DRAIN_S = 30                    # the queue drains this soon after the faults


def now_mono():
    return time.monotonic()


def errcode(e):
    """A short label for an error: the SQLSTATE the server sent, or what a
    lost connection's message says."""
    st = getattr(e, "sqlstate", None)
    if st:
        return st
    m = str(e)
    if "administrator command" in m:
        return "terminated"
    if "crash of another server process" in m:
        return "crash"
    if "immediate shutdown" in m or "shutting down" in m:
        return "shutdown"
    if "starting up" in m or "recovery mode" in m or "not yet accepting" in m:
        return "startup"
    if "Connection refused" in m:
        return "refused"
    if "timeout" in m:
        return "timeout"
    return "conn"


class History:
    """Append-only JSON lines, one write() per line, shared by threads."""

    def __init__(self, path):
        self.f = open(path, "a", buffering=1)
        self.lock = threading.Lock()

    def write(self, rec):
        line = json.dumps(rec, separators=(",", ":"), default=str) + "\n"
        with self.lock:
            self.f.write(line)


class Client:
    """One connection of one client, running tracked operations.

    op() runs one transaction: sql must select (xid, t0, result, t1); post,
    if given, runs further statements in the same transaction and returns
    fields to record.  Before COMMIT a "pre" line with the xid is written;
    after it the "op" line with the outcome: ok, fail (definite: the
    transaction did not commit), or info (the connection broke during
    COMMIT: unknown until pg_xact_status() tells).
    """

    seq_lock = threading.Lock()
    seq = 0

    def __init__(self, cid, inc, dsn, hist, deadline, pool=False):
        self.cid, self.inc, self.dsn, self.hist = cid, inc, dsn, hist
        self.deadline = deadline
        self.pool = pool
        self.conn = None
        self.connect_failures = 0

    def next_seq(self):
        with Client.seq_lock:
            Client.seq += 1
            return Client.seq

    def connect(self, stop=None):
        while now_mono() < self.deadline and not (stop and stop.is_set()):
            try:
                self.conn = psycopg.connect(
                    self.dsn, application_name="fault-%s" % self.cid,
                    prepare_threshold=None if self.pool else 5)
                return True
            except psycopg.Error:
                self.connect_failures += 1
                time.sleep(0.1)
        return False

    def drop(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
        self.conn = None

    def op(self, kind, sql, params, fields, post=None, stop=None):
        rec = dict(k="op", c=self.cid, i=self.inc, s=self.next_seq(), op=kind)
        rec.update(fields)
        if self.conn is None or self.conn.closed:
            if not self.connect(stop):
                rec.update(outcome="fail", err="connect")
                self.hist.write(rec)
                return rec
        conn = self.conn
        try:
            row = conn.execute(sql, params).fetchone()
            rec.update(xid=row[0], t0=row[1], r=row[2], t1=row[3])
            if post is not None:
                rec.update(post(conn, row[2]))
        except psycopg.Error as e:
            rec.update(outcome="fail", err=errcode(e))
            self.after_error()
            self.hist.write(rec)
            return rec
        pre = dict(rec, k="pre")
        self.hist.write(pre)
        try:
            conn.commit()
            rec["outcome"] = "ok"
        except psycopg.Error as e:
            rec["err"] = errcode(e)
            broken = conn.closed or conn.broken
            rec["outcome"] = "info" if broken else "fail"
            self.after_error()
        self.hist.write(rec)
        return rec

    def after_error(self):
        conn = self.conn
        if conn is None:
            return
        if conn.closed or conn.broken:
            self.drop()
            return
        try:
            conn.rollback()
        except psycopg.Error:
            self.drop()


HEAD = "SELECT pg_current_xact_id()::text::bigint, fault.us(clock_timestamp()), "
TAIL = ", fault.us(clock_timestamp())"


def ms(x):
    return datetime.timedelta(milliseconds=x)


# ---------------------------------------------------------------------------
# Lock client (D1): take a lease on a random hot name with a random ttl; while
# it is held make 1-3 fenced writes (stopping at the first the fence
# refuses), renew with probability 0.5 and write once more, then release (or
# abandon the lease with probability 0.2: it runs out, and another client
# takes it over).
# ---------------------------------------------------------------------------

def fenced_write(name, token, owner):
    def post(conn, _):
        row = conn.execute(
            "WITH u AS (UPDATE fault.resource SET last_token = %(t)s,"
            " writes = writes + 1 WHERE name = %(n)s AND last_token <= %(t)s"
            " RETURNING name)"
            " INSERT INTO fault.writes (name, token, owner)"
            " SELECT name, %(t)s, %(o)s FROM u RETURNING at",
            dict(t=token, n=name, o=owner)).fetchone()
        return dict(accepted=row is not None, wat=row[0] if row else None)
    return post


def client_start(a):
    """What every client process sets up first: a stop flag raised by
    SIGTERM, its random stream, its owner label, its history file and its
    connection.  Returns (stop, rng, owner, hist, deadline, cl, parent)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    rng = random.Random(a.seed)
    owner = "%s.%d@%d" % (a.cid, a.inc, os.getpid())
    hist = History(os.path.join(a.dir, "ops-%s.%d.jsonl" % (a.cid, a.inc)))
    deadline = now_mono() + a.max_time
    cl = Client(a.cid, a.inc, a.dsn, hist, deadline, a.pool)
    return stop, rng, owner, hist, deadline, cl, os.getppid()


def run_locker(a):
    stop, rng, owner, hist, deadline, cl, parent = client_start(a)
    names = json.loads(a.names)

    def alive():
        return (not stop.is_set() and now_mono() < deadline
                and os.getppid() == parent)

    def acquire(name, ttl):
        return cl.op("acquire", HEAD + "distlock.try_acquire(%s, %s, %s)" + TAIL,
                     (name, owner, ms(ttl)),
                     dict(name=name, owner=owner, ttl=int(ttl * 1000)))

    def renew(name, token, ttl):
        return cl.op("renew", HEAD + "distlock.renew(%s, %s, %s)" + TAIL,
                     (name, owner, ms(ttl)),
                     dict(name=name, owner=owner, token=token, ttl=int(ttl * 1000)))

    def release(name, token):
        return cl.op("release", HEAD + "distlock.release(%s, %s)" + TAIL,
                     (name, owner),
                     dict(name=name, owner=owner, token=token))

    def write(name, token):
        return cl.op("write", HEAD + "distlock.fence(%s, %s)" + TAIL,
                     (name, token),
                     dict(name=name, owner=owner, token=token),
                     post=fenced_write(name, token, owner))

    avoid = {}                  # abandoned leases: left alone until they run out
    while alive():
        name = rng.choice(names)
        if avoid.get(name, 0) > now_mono():
            time.sleep(0.005)
            continue
        ttl = rng.uniform(*LOCK_TTL_MS)
        r = acquire(name, ttl)
        if r["outcome"] != "ok" or r.get("r") is None:
            time.sleep(rng.uniform(0.01, 0.05))
            continue
        token = r["r"]
        refused = False
        for _ in range(rng.randint(1, 3)):
            time.sleep(rng.uniform(0, ttl * 0.2) / 1000)
            if not alive():
                break
            refused = write(name, token).get("err") == "55000"
            if refused:
                break           # fenced out: the lease is gone
        if not alive():
            break
        if not refused and rng.random() < 0.5:
            ttl = rng.uniform(*LOCK_TTL_MS)
            r = renew(name, token, ttl)
            if r["outcome"] == "ok" and r.get("r"):
                time.sleep(rng.uniform(0, ttl * 0.2) / 1000)
                write(name, token)
        if rng.random() < 0.2:
            avoid[name] = now_mono() + ttl / 1000
            continue            # abandon: let the lease run out
        release(name, token)
    cl.drop()


# ---------------------------------------------------------------------------
# Queue worker (D2): a session heartbeated from its own connection every
# 250 ms; claim 1-10 jobs, work 0-10 ms on each, then acknowledge it in a
# transaction that inserts the job's effect only if complete() said true
# (or, 2% of the time, fail() it for a retry).  For a third of the claims
# (BATCH_SHARE) the jobs not failed are acknowledged together once all are
# worked on: one complete_batch() in a transaction that inserts one effect
# per id it returned; a third of those batches (BATCH_CLAIM_SHARE) go
# through one complete_batch_and_claim() instead, which acknowledges them
# all or raises, with one effect per id, and whose claimed jobs are the
# worker's next jobs, worked on without a claim.  Connections come and go;
# the session stays, unless the heartbeat answers false or a claim's outcome
# is unknown: then the worker opens a new session, and the old one's jobs
# come back when it expires.
# ---------------------------------------------------------------------------

def run_worker(a):
    stop, rng, owner, hist, deadline, cl, parent = client_start(a)

    def alive():
        return (not stop.is_set() and now_mono() < deadline
                and os.getppid() == parent)

    def heartbeat_loop(sid, lost):
        hb = Client(a.cid + "h", a.inc, a.dsn, hist, deadline, a.pool)
        while not lost.wait(HEARTBEAT_S) and alive():
            r = hb.op("heartbeat", HEAD + "distlock.heartbeat(%s)" + TAIL,
                      (sid,), dict(sid=sid), stop=lost)
            if r["outcome"] == "ok" and r.get("r") is False:
                lost.set()
        hb.drop()

    def insert_effects(conn, jobs):
        """One effect row per job of jobs, in the acknowledgement's
        transaction."""
        if not jobs:
            return {}
        conn.execute("INSERT INTO fault.effects (job_id, session_id, worker)"
                     " SELECT j, %s::uuid, %s FROM unnest(%s::bigint[]) j",
                     (sid, owner, jobs))
        return dict(effects=len(jobs))

    def ack_batch(batch):
        """Acknowledge the jobs of batch with one complete_batch(), and
        insert one effect per id it returned (the ids it acknowledged, in
        ascending order).  Tried once more on a failed or unknown outcome,
        like a single acknowledgement: complete_batch() leaves out a job
        already done."""
        for _ in range(2):
            r = cl.op("ack_batch",
                      HEAD + "(SELECT coalesce(array_agg(id ORDER BY n), '{}')"
                      " FROM distlock.complete_batch(%s::bigint[], %s)"
                      " WITH ORDINALITY AS t(id, n))" + TAIL,
                      (batch, sid), dict(sid=sid, jobs=batch),
                      post=insert_effects)
            if r["outcome"] == "ok" or not alive():
                break
        if r["outcome"] != "ok":
            lost.set()

    def ack_batch_claim(batch):
        """Acknowledge the jobs of batch with one complete_batch_and_claim(),
        insert one effect per id (it acknowledged every one, or raised), and
        return the jobs it claimed (at most as many), ours now.  A
        refusal (55000: a job of the batch no longer ours; 42704: the
        session gone) rolled the whole transaction back, effects included:
        nothing of the batch is ours any more, as after a complete() that
        said false, and nothing was claimed.  A definite failure is tried
        once more with the same ids (nothing committed); an unknown outcome
        is not: if it committed, the jobs it claimed stay the session's
        while it lives, so the session is given up, as after a claim's."""
        for _ in range(2):
            r = cl.op("ack_batch_claim",
                      HEAD + "(SELECT coalesce(array_agg(id ORDER BY id), '{}')"
                      " FROM distlock.complete_batch_and_claim(%s::bigint[], %s))" + TAIL,
                      (batch, sid), dict(sid=sid, jobs=batch),
                      post=lambda conn, _: insert_effects(conn, batch))
            if r["outcome"] != "fail" or r.get("err") in ("55000", "42704") \
                    or not alive():
                break
        if r["outcome"] == "ok":
            return r["r"]
        if r.get("err") not in ("55000", "42704"):
            lost.set()
        return []

    # jobs that complete_batch_and_claim() claimed, worked on next
    held = []
    sid, lost, hb_thread = None, threading.Event(), None
    while alive():
        if sid is None or lost.is_set():
            lost.set()
            held = []           # the old session's: back when it expires
            if hb_thread is not None:
                hb_thread.join(timeout=5)
            r = cl.op("open", HEAD + "distlock.session_open(%s, %s)::text" + TAIL,
                      (datetime.timedelta(seconds=SESSION_TTL_S), owner),
                      dict(owner=owner))
            if r["outcome"] != "ok":
                sid = None
                time.sleep(0.05)
                continue
            sid, lost = r["r"], threading.Event()
            hb_thread = threading.Thread(target=heartbeat_loop, args=(sid, lost),
                                         daemon=True)
            hb_thread.start()
        if held:
            jobs, held = held, []
        else:
            n = rng.randint(1, 10)
            r = cl.op("claim",
                      HEAD + "(SELECT coalesce(array_agg(id ORDER BY id), '{}')"
                      " FROM distlock.claim(%s, %s, %s))" + TAIL,
                      (QUEUE, sid, n), dict(sid=sid, n=n))
            if r["outcome"] == "info" or r.get("err") in ("55000", "42704"):
                # jobs claimed in a transaction of unknown outcome would stay
                # ours while the session lives: give it up, they come back
                lost.set()
                continue
            if r["outcome"] != "ok":
                time.sleep(0.05)    # nothing claimed; the session is still ours
                continue
            jobs = r["r"]
            if not jobs:
                time.sleep(0.05)
                continue
        batch = [] if rng.random() < BATCH_SHARE else None
        for job in jobs:
            time.sleep(rng.uniform(*WORK_MS) / 1000)
            kind = "fail" if rng.random() < 0.02 else "ack"
            if kind == "ack" and batch is not None:
                batch.append(job)
                continue
            # A failed or unknown acknowledgement is tried once more, on a
            # new connection if need be, with the same session: complete()
            # is idempotent (false once the job is done), and the session is
            # a value, not a connection.
            for _ in range(2):
                if kind == "fail":
                    r = cl.op("fail",
                              HEAD + "distlock.fail(%s, %s, 'injected', '0')" + TAIL,
                              (job, sid), dict(sid=sid, job=job))
                else:
                    def effect(conn, acked, job=job):
                        if not acked:
                            return {}
                        conn.execute("INSERT INTO fault.effects (job_id, session_id,"
                                     " worker) VALUES (%s, %s, %s)", (job, sid, owner))
                        return dict(effect=True)
                    r = cl.op("ack", HEAD + "distlock.complete(%s, %s)" + TAIL,
                              (job, sid), dict(sid=sid, job=job), post=effect)
                if r["outcome"] == "ok" or not alive():
                    break
            if r["outcome"] != "ok":
                lost.set()
                break
            if not alive():
                break
        else:
            if batch and alive():
                if rng.random() < BATCH_CLAIM_SHARE:
                    held = ack_batch_claim(batch)
                else:
                    ack_batch(batch)
    lost.set()
    if sid is not None and stop.is_set():
        cl.op("close", HEAD + "distlock.session_close(%s)" + TAIL, (sid,),
              dict(sid=sid))
    cl.drop()


# ---------------------------------------------------------------------------
# The orchestrator: setup, clients, faults, shutdown, export.
# ---------------------------------------------------------------------------

def peek_slot(c):
    """The lines of slot "fault" that read_slot() keeps ({lsn, xid, data}),
    in WAL order, peeked with a connection to the slot's database."""
    c.execute("SET statement_timeout = 0")
    c.execute("SET TimeZone = 'UTC'")
    c.execute("SET DateStyle = 'ISO, YMD'")
    for lsn, xid, data in c.cursor().stream(
            "SELECT lsn::text, xid::text::bigint, data"
            " FROM pg_logical_slot_peek_changes('fault', NULL, NULL,"
            " 'include-xids', '1', 'include-timestamp', '1',"
            " 'skip-empty-xacts', '1')"
            " WHERE data LIKE 'table distlock.%' OR data LIKE 'COMMIT %'"):
        yield dict(lsn=lsn, xid=xid, data=data)


class Harness:
    """The harness's own connection, direct to the server (never through the
    pool, never a fault target).  Survives restarts by reconnecting."""

    def __init__(self, dsn):
        self.dsn = dsn
        self.conn = None

    def q(self, sql, params=None, fetch="all"):
        for _ in range(2):
            try:
                if self.conn is None or self.conn.closed:
                    self.conn = psycopg.connect(self.dsn, autocommit=True,
                                                application_name="fault-harness",
                                                connect_timeout=2)
                cur = self.conn.execute(sql, params)
                if fetch == "all":
                    return cur.fetchall()
                if fetch == "one":
                    return cur.fetchone()
                return None
            except psycopg.Error:
                try:
                    if self.conn is not None:
                        self.conn.close()
                except Exception:
                    pass
                self.conn = None
        return None

    def server_us(self):
        r = self.q("SELECT fault.us(clock_timestamp())", fetch="one")
        return r[0] if r else None


class Proc:
    def __init__(self, role, idx, inc, popen):
        self.role, self.idx, self.inc, self.popen = role, idx, inc, popen
        self.cid = ("L%d" if role == "locker" else "W%d") % idx
        self.paused_at = self.paused_until = None


class Orchestrator:
    def __init__(self, a):
        self.a = a
        spec = SCENARIOS[a.scenario]
        self.title = spec["title"]
        self.mode = "soak" if a.soak else "gate"
        self.path = a.path
        # (test/failover/failover.py's arguments have no --delete-completed)
        delete = getattr(a, "delete_completed", False)
        self.name = a.scenario + ("-del" if delete else "") + ("-sql" if a.path == "sql" else "")
        # the second runs (SQL path, deleting acknowledgements) are smaller
        self.p = dict(spec[self.mode + ("_sql" if a.path == "sql" or delete else "")])
        self.p.update(json.loads(a.set or "{}"))
        self.rng = random.Random(a.seed)
        self.paused_kinds = {}      # pauses so far: "lease", "jobs"
        self.dir = a.dir
        os.makedirs(self.dir, exist_ok=True)
        self.direct = ("host=127.0.0.1 port=%d dbname=fault user=postgres"
                       " connect_timeout=3" % a.port)
        self.pool = bool(self.p.get("pool"))
        cycles = self.p.get("cycles", 0)
        # faults run for duration seconds (lock and combined runs; crash
        # cycles: until just after the last restart), else until the queue
        # is nearly done
        self.duration = self.p.get("duration") or (
            cycles * self.p["cycle_s"] + 3 if cycles else 0)
        self.max_time = self.p.get("max_time", self.duration + 60)
        self.client_dsn = self.direct if not self.pool else (
            "host=127.0.0.1 port=%d dbname=fault user=postgres connect_timeout=3"
            % a.pool_port)
        self.h = Harness(self.direct)
        self.faults = History(os.path.join(self.dir, "faults.jsonl"))
        self.hist = History(os.path.join(self.dir, "ops-H.jsonl"))
        self.procs = []
        self.hcl = None
        self.counts = {}
        self.restarts = []
        self.restart_proc = None
        self.pgss = History(os.path.join(self.dir, "pgss.jsonl"))
        self.pgss_texts = {}
        self.meta = dict(scenario=a.scenario, name=self.name, path=self.path,
                         title=self.title + (" (distlock.direct_path = off)"
                                             if self.path == "sql" else ""),
                         mode=self.mode, seed=a.seed, pool=self.pool, params=self.p,
                         floors=dict(self.p.get("floors", {})),
                         lock_ttl_ms=LOCK_TTL_MS, session_ttl_s=SESSION_TTL_S,
                         batch_share=BATCH_SHARE, batch_claim_share=BATCH_CLAIM_SHARE)
        if self.p.get("workers"):
            # complete_batch() must have carried a fair share of the jobs
            # (a third of the claims go through it)
            self.meta["floors"]["batch_acks"] = max(1, self.p["jobs"] // 10)
            # and complete_batch_and_claim() a third of the batches: calls
            # that committed, some 2% of the jobs in the gate runs, half that
            self.meta["floors"]["batch_claims"] = max(1, self.p["jobs"] // 100)

    # -- bookkeeping ---------------------------------------------------------

    def fault(self, kind, **kw):
        self.counts[kind] = self.counts.get(kind, 0) + 1
        rec = dict(k=kind, m=round(now_mono() - self.t_start, 3))
        rec.update(kw)
        self.faults.write(rec)

    def spawn(self, role, idx, inc):
        names = ["n%d" % i for i in range(self.p.get("names", 0))]
        cmd = [sys.executable, os.path.abspath(__file__), role,
               "--cid", ("L%d" if role == "locker" else "W%d") % idx,
               "--inc", str(inc), "--dir", self.dir, "--dsn", self.client_dsn,
               "--seed", str(self.a.seed * 1000 + idx * 100 + inc),
               "--names", json.dumps(names),
               "--max-time", str(self.max_time + 60)]
        if self.pool:
            cmd.append("--pool")
        log = open(os.path.join(self.dir, "client-%s%d.%d.log"
                                % (role[0], idx, inc)), "w")
        po = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        with open(os.path.join(self.dir, "pids"), "a") as f:
            f.write("%d\n" % po.pid)
        pr = Proc(role, idx, inc, po)
        self.procs.append(pr)
        return pr

    def live_procs(self, role=None):
        return [p for p in self.procs if p.popen.poll() is None
                and (role is None or p.role == role)]

    def track(self, kind, sql, params, fields):
        """A tracked operation of the harness itself (enqueue, reap, probes),
        given a few seconds to connect."""
        if self.hcl is None:
            self.hcl = Client("H", 0, self.direct, self.hist, 0)
        self.hcl.deadline = now_mono() + 3
        return self.hcl.op(kind, HEAD + sql + TAIL, params, fields)

    # -- setup ---------------------------------------------------------------

    def setup(self):
        with psycopg.connect(self.direct.replace("dbname=fault", "dbname=postgres"),
                             autocommit=True) as c:
            c.execute("CREATE DATABASE fault")
            # lock_timeout keeps a contender from waiting on a frozen
            # holder's fence for long; statement_timeout bounds everything.
            c.execute("ALTER DATABASE fault SET lock_timeout = '1s'")
            c.execute("ALTER DATABASE fault SET statement_timeout = '15s'")
        with psycopg.connect(self.direct, autocommit=True) as c:
            with open(os.path.join(HERE, "setup.sql")) as f:
                c.execute(f.read())
            # The history of distlock's rows: a logical slot created before
            # the first of them is written (its own transaction: a slot
            # cannot be created in one that wrote).  Read at the end.
            self.meta["slot_lsn"] = c.execute(
                "SELECT lsn::text FROM pg_create_logical_replication_slot("
                "'fault', 'test_decoding')").fetchone()[0]
            for i in range(self.p.get("names", 0)):
                c.execute("INSERT INTO fault.resource (name) VALUES (%s)", ("n%d" % i,))
            self.meta["settings"] = dict(c.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN"
                " ('track_commit_timestamp', 'synchronous_commit', 'fsync',"
                " 'restart_after_crash', 'lock_timeout', 'server_version',"
                " 'wal_level', 'shared_preload_libraries',"
                " 'pg_stat_statements.track', 'debug_assertions')").fetchall())
            # what the clients' sessions run with (postgresql.conf; CREATE
            # EXTENSION loaded the library in this session)
            for g in ("distlock.direct_path", "distlock.delete_completed"):
                self.meta["settings"][g] = c.execute(
                    "SELECT current_setting(%s, true)", (g,)).fetchone()[0]
            # count from here on: setup's statements are not the workload's
            c.execute("SELECT pg_stat_statements_reset()")
        q = self.p.get("jobs", 0)
        batch = 2000
        for lo in range(1, q + 1, batch):
            hi = min(q, lo + batch - 1)
            r = self.track("enqueue",
                           "(SELECT count(distlock.enqueue(%s, jsonb_build_object('n', g),"
                           " max_attempts => 1000)) FROM generate_series(%s::int, %s::int) g)",
                           (QUEUE, lo, hi), dict(lo=lo, hi=hi))
            if r["outcome"] != "ok":
                raise RuntimeError("enqueue failed: %r" % r)
        self.meta["jobs"] = q

    # -- faults --------------------------------------------------------------

    def server_down(self):
        return self.restart_proc is not None and self.restart_proc.poll() is None

    def do_term(self):
        rows = self.h.q(
            "SELECT pid FROM pg_stat_activity WHERE datname = 'fault'"
            " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            " AND application_name <> 'fault-harness'")
        if not rows:
            return
        pid = self.rng.choice(rows)[0]
        r = self.h.q("SELECT pg_terminate_backend(%s)", (pid,), fetch="one")
        if r and r[0]:
            self.fault("term", pid=pid)

    def do_kill(self):
        cands = [p for p in self.live_procs() if p.paused_until is None]
        if not cands:
            return
        p = self.rng.choice(cands)
        try:
            os.kill(p.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        p.popen.wait()
        self.fault("kill", c=p.cid, inc=p.inc, pid=p.popen.pid)
        self.spawn(p.role, p.idx, p.inc + 1)

    def do_pause(self):
        """SIGSTOP a client that holds something: a lease (for longer than
        what is left of it) or claimed jobs (for longer than its session's
        ttl).  Zombies are what the pause is for."""
        by_pid = {p.popen.pid: p for p in self.live_procs() if p.paused_until is None}
        cands = []
        lock_rows = self.h.q(
            "SELECT l.owner, l.name, fault.us(l.expires_at),"
            " fault.us(clock_timestamp()) FROM distlock.active_locks l"
            " WHERE l.owner LIKE 'L%%' AND l.expires_at IS NOT NULL") or []
        for owner, name, exp, now in lock_rows:
            pid = int(owner.split("@")[1])
            if pid in by_pid:
                cands.append(("lease", by_pid[pid], name, exp, now))
        job_rows = self.h.q(
            "SELECT DISTINCT s.owner, fault.us(s.expires_at),"
            " fault.us(clock_timestamp()) FROM distlock.jobs j"
            " JOIN distlock.sessions s ON s.id = j.session_id"
            " WHERE j.status = 'running' AND s.owner LIKE 'W%%'") or []
        for owner, exp, now in job_rows:
            pid = int(owner.split("@")[1])
            if pid in by_pid:
                cands.append(("jobs", by_pid[pid], None, exp, now))
        if not cands:
            return
        # Of a run with both workloads, the kind paused less so far, jobs
        # first (the queue drains before the faults stop): a choice among
        # all holders could pause only lease holders (more of them) and
        # leave the queue without the zombie acknowledgements its floor
        # asks for.
        kinds = {c[0] for c in cands}
        if len(kinds) > 1:
            least = min(sorted(kinds), key=lambda k: self.paused_kinds.get(k, 0))
            cands = [c for c in cands if c[0] == least]
        what, p, name, exp, now = self.rng.choice(cands)
        self.paused_kinds[what] = self.paused_kinds.get(what, 0) + 1
        left = max(0.0, (exp - now) / 1e6)
        if what == "lease":
            dur = max(1.5 * left, left + 0.3)
        else:
            dur = max(PAUSE_JOB_S, left + 0.5)
        try:
            os.kill(p.popen.pid, signal.SIGSTOP)
        except ProcessLookupError:
            return
        p.paused_at = now_mono()
        p.paused_until = p.paused_at + dur
        self.fault("pause", c=p.cid, inc=p.inc, pid=p.popen.pid, what=what,
                   name=name, until_us=exp, start_us=now, dur=round(dur, 3))

    def resume(self, p):
        # how long the client was stopped, by the harness's clock: the
        # checker's measure when the server's clock cannot be read (a
        # resume while the server restarts)
        stopped = now_mono() - p.paused_at
        try:
            os.kill(p.popen.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        p.paused_until = None
        self.fault("resume", c=p.cid, inc=p.inc, pid=p.popen.pid,
                   at_us=self.h.server_us(), stopped_s=round(stopped, 6))

    def do_crash(self):
        rows = self.h.q(
            "SELECT pid FROM pg_stat_activity WHERE datname = 'fault'"
            " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            " AND application_name <> 'fault-harness'")
        if not rows:
            return False
        pid = self.rng.choice(rows)[0]
        before = self.h.server_us()
        self.pgss_sample("crash")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        self.fault("crash", pid=pid, before_us=before)
        # the postmaster restarts every backend: wait until it serves again
        time.sleep(0.2)
        after = None
        for _ in range(150):
            after = self.h.server_us()
            if after is not None:
                break
            time.sleep(0.1)
        self.restarts.append(dict(kind="crash", before_us=before, after_us=after))
        return True

    def start_restart(self, down):
        before = self.h.server_us()
        self.pgss_sample("restart")
        self.restart_proc = subprocess.Popen(
            ["bash", os.path.join(HERE, "server.sh"), "restart", self.a.cluster_dir,
             str(down)],
            stdout=open(os.path.join(self.dir, "restart.log"), "a"),
            stderr=subprocess.STDOUT)
        self.fault("restart", mode="immediate", before_us=before, down=down)
        self.restarts.append(dict(kind="immediate", before_us=before))

    def finish_restart(self):
        rc = self.restart_proc.wait()
        self.restart_proc = None
        if rc != 0:
            raise RuntimeError("server restart failed (see restart.log)")
        after = None
        for _ in range(100):
            after = self.h.server_us()
            if after is not None:
                break
            time.sleep(0.1)
        self.restarts[-1]["after_us"] = after

    # -- which path ran --------------------------------------------------------

    def pgss_sample(self, why):
        """Record pg_stat_statements' counts of the statements distlock runs
        inside its functions.  A crash (and the restart after an immediate
        stop) may start the counters again from zero, with a new
        stats_reset: the checker adds up the largest sample of each counter
        lifetime.  Samples are taken every 0.5 s, right before each restart
        and crash the harness causes, and at the end."""
        rows = self.h.q(
            "SELECT fault.us(i.stats_reset), i.dealloc, s.queryid, s.calls, s.query"
            " FROM pg_stat_statements_info i LEFT JOIN pg_stat_statements s"
            " ON s.dbid = (SELECT oid FROM pg_database WHERE datname = 'fault')"
            " AND NOT s.toplevel AND s.query LIKE '%%distlock.%%'")
        if not rows:
            return
        calls = {}
        for _, _, qid, n, text in rows:
            if qid is None:
                continue
            calls[str(qid)] = n
            if str(qid) not in self.pgss_texts:
                self.pgss_texts[str(qid)] = text
                self.pgss.write(dict(k="text", q=str(qid), text=text))
        self.pgss.write(dict(k="sample", why=why, m=round(now_mono() - self.t_start, 3),
                             reset=rows[0][0], dealloc=rows[0][1], calls=calls))

    # -- the run -------------------------------------------------------------

    def progress(self):
        """(jobs done, jobs in all): a job whose acknowledgement deleted it
        (distlock.delete_completed) has left the table."""
        r = self.h.q("SELECT count(*) FILTER (WHERE status = 'completed'),"
                     " count(*) FROM distlock.jobs", fetch="one")
        if not r:
            return None
        total = max(r[1], self.p.get("jobs", 0))
        return r[0] + total - r[1], total

    def run(self):
        p = self.p
        self.setup()
        self.t_start = now_mono()
        self.meta["start_us"] = self.h.server_us()
        for i in range(p.get("lock_clients", 0)):
            self.spawn("locker", i, 1)
        for i in range(p.get("workers", 0)):
            self.spawn("worker", i, 1)

        cycles = p.get("cycles", 0)
        duration = self.duration
        max_time = self.max_time
        queue = p.get("jobs", 0) > 0
        periods = {k: p[k] for k in ("term", "kill", "pause") if p.get(k)}
        next_at = {k: self.t_start + self.rng.uniform(0.5, 1.0) * v
                   for k, v in periods.items()}
        restarts_t = sorted(p.get("restarts", []))
        crashes_t = sorted(p.get("crashes", []))
        # failovers (test/failover): a subclass's do_failover() blocks
        # until the promoted standby serves
        failovers_t = sorted(p.get("failovers", []))
        restart_prog = sorted(p.get("restart_progress", []))
        cycle_next = self.t_start + p.get("cycle_s", 0) if cycles else None
        cycles_done = 0
        next_reap = self.t_start + REAP_S
        next_prog = self.t_start
        done = total = 0
        faults_on = True
        faults_off_at = None
        lockers_stopped = False

        while True:
            t = now_mono()
            el = t - self.t_start
            if self.restart_proc is not None and self.restart_proc.poll() is not None:
                self.finish_restart()
            if t >= next_prog and not self.server_down():
                pr = self.progress()
                if pr:
                    done, total = pr
                self.pgss_sample("tick")
                next_prog = t + 0.5
            frac = done / total if total else (0.0 if queue else 1.0)

            # when faults stop: after the duration (lock and combined runs),
            # after the last cycle, or at a fraction of the queue (queue runs)
            if faults_on:
                if duration and el >= duration:
                    faults_on = False
                elif not duration and queue and frac >= p.get("fault_until_progress", 1):
                    faults_on = False
                if not faults_on:
                    faults_off_at = t
                    self.meta["faults_off_s"] = round(el, 3)

            # A worker's pause runs its course after the faults stop: cut
            # short, it would end before the session it outlasts (the
            # quickest queue runs stop their faults some 10 s in, with one
            # or two pauses under way).  Lock clients stop with the faults.
            for pr_ in self.live_procs():
                if pr_.paused_until is not None and (
                        t >= pr_.paused_until
                        or (not faults_on and pr_.role == "locker")):
                    self.resume(pr_)

            if faults_on and not self.server_down():
                for k in periods:
                    if t >= next_at[k]:
                        next_at[k] = t + periods[k] * self.rng.uniform(0.5, 1.5)
                        getattr(self, "do_" + k)()
                if restarts_t and duration and el >= restarts_t[0] * duration:
                    restarts_t.pop(0)
                    self.start_restart(p.get("downtime_s", 0.5))
                if restart_prog and queue and frac >= restart_prog[0]:
                    restart_prog.pop(0)
                    self.start_restart(p.get("downtime_s", 0.5))
                if crashes_t and duration and el >= crashes_t[0] * duration:
                    if self.do_crash():
                        crashes_t.pop(0)
                if failovers_t and duration and el >= failovers_t[0] * duration:
                    failovers_t.pop(0)
                    self.do_failover()
                if cycle_next is not None and t >= cycle_next and cycles_done < cycles:
                    cycles_done += 1
                    self.start_restart(p.get("downtime_s", 2.5))
                    cycle_next = t + p["cycle_s"]

            if t >= next_reap and not self.server_down():
                self.track("reap", "distlock.reap()", (), {})
                next_reap = t + REAP_S

            if not faults_on and not lockers_stopped and not self.server_down():
                self.stop_procs("locker")
                lockers_stopped = True
            if not faults_on and not self.server_down() and (
                    not queue or done >= total
                    or t - faults_off_at > p.get("drain_s", DRAIN_S)):
                break
            if el > max_time:
                self.meta["timed_out"] = True
                break
            time.sleep(0.02)

        if self.restart_proc is not None:
            self.finish_restart()
        self.meta["drain_s"] = round(now_mono() - faults_off_at, 3) if faults_off_at else None
        self.meta["drained"] = (not queue) or done >= total
        self.meta["drain_bound_s"] = p.get("drain_s", DRAIN_S)
        for pr_ in self.live_procs():
            if pr_.paused_until is not None:
                self.resume(pr_)
        self.stop_procs(None)
        self.meta["end_s"] = round(now_mono() - self.t_start, 3)
        self.quiesce()
        self.pgss_sample("end")
        if p.get("names"):
            self.liveness()
        self.meta["fault_counts"] = self.counts
        self.meta["restarts"] = self.restarts
        self.export()

    def stop_procs(self, role):
        procs = self.live_procs(role)
        for pr in procs:
            try:
                os.kill(pr.popen.pid, signal.SIGCONT)
                os.kill(pr.popen.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        end = now_mono() + 8
        for pr in procs:
            try:
                pr.popen.wait(timeout=max(0.1, end - now_mono()))
            except subprocess.TimeoutExpired:
                pr.popen.kill()
                pr.popen.wait()

    def kill_all(self):
        for pr in self.procs:
            if pr.popen.poll() is None:
                try:
                    pr.popen.send_signal(signal.SIGCONT)
                    pr.popen.kill()
                    pr.popen.wait(timeout=5)
                except Exception:
                    pass
        if self.restart_proc is not None and self.restart_proc.poll() is None:
            self.restart_proc.wait(timeout=90)

    def quiesce(self):
        """No client transaction may still be open when the history is read."""
        for _ in range(100):
            rows = self.h.q(
                "SELECT pid FROM pg_stat_activity WHERE datname = 'fault'"
                " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
                " AND state <> 'idle'")
            if rows is not None and not rows:
                return
            for (pid,) in rows or []:
                self.h.q("SELECT pg_terminate_backend(%s)", (pid,))
            time.sleep(0.1)

    def liveness(self):
        """Quiet period: every name is acquirable within the longest ttl + 1 s."""
        worst = 0.0
        failed = []
        for i in range(self.p["names"]):
            name = "n%d" % i
            t0 = now_mono()
            got = None
            while now_mono() - t0 < LOCK_TTL_MS[1] / 1000 + 5:
                r = self.track("acquire", "distlock.try_acquire(%s, %s, '10 seconds')",
                               (name, "H.probe"), dict(name=name, owner="H.probe",
                                                       ttl=10000000))
                if r["outcome"] == "ok" and r.get("r") is not None:
                    got = r["r"]
                    break
                time.sleep(0.05)
            took = now_mono() - t0
            worst = max(worst, took)
            if got is None:
                failed.append(name)
            else:
                self.track("release", "distlock.release(%s, %s)", (name, "H.probe"),
                           dict(name=name, owner="H.probe", token=got))
        self.meta["liveness"] = dict(worst_s=round(worst, 3), failed=failed,
                                     bound_s=LOCK_TTL_MS[1] / 1000 + 1)

    def read_slot(self, c):
        """Write the slot's changes of distlock's rows, and every commit
        record (test_decoding's "COMMIT xid (at time)"), to wal.jsonl in the
        order of the WAL, which is commit order.  Peeked, not consumed.
        Times print in UTC and ISO style, which checker.py parses."""
        t0 = now_mono()
        n = 0
        with open(os.path.join(self.dir, "wal.jsonl"), "w") as f:
            for ln in peek_slot(c):
                f.write(json.dumps(ln, separators=(",", ":")) + "\n")
                n += 1
        self.meta["wal_lines"] = n
        self.meta["wal_read_s"] = round(now_mono() - t0, 3)

    def export(self):
        c = psycopg.connect(self.direct, autocommit=True)

        def dump(fname, sql, cols, params=None):
            with open(os.path.join(self.dir, fname), "w") as f:
                cur = c.execute(sql, params)
                for row in cur:
                    f.write(json.dumps(dict(zip(cols, row)), separators=(",", ":"),
                                       default=str) + "\n")

        dump("writes.jsonl",
             "SELECT id, name, token, owner, xid::text::bigint, at,"
             " fault.us(pg_xact_commit_timestamp(xid::xid)) FROM fault.writes ORDER BY id",
             ["id", "name", "token", "owner", "xid", "at", "commit"])
        dump("effects.jsonl",
             "SELECT id, job_id, session_id::text, worker, xid::text::bigint, at,"
             " fault.us(pg_xact_commit_timestamp(xid::xid)) FROM fault.effects ORDER BY id",
             ["id", "job", "sid", "worker", "xid", "at", "commit"])
        # the final state of distlock's tables, which the last version of
        # each row in the WAL must match
        dump("jobs.jsonl",
             "SELECT id, status::text, attempts, session_id::text FROM distlock.jobs ORDER BY id",
             ["id", "status", "attempts", "sid"])
        dump("locks.jsonl",
             "SELECT name, owner, session_id::text, token, fault.us(expires_at)"
             " FROM distlock.locks ORDER BY name",
             ["name", "owner", "session", "token", "expires"])
        dump("sessions.jsonl",
             "SELECT id::text, owner, fault.us(expires_at) FROM distlock.sessions ORDER BY id",
             ["id", "owner", "expires"])
        xids = set()
        for fn in os.listdir(self.dir):
            if fn.startswith("ops-") and fn.endswith(".jsonl"):
                with open(os.path.join(self.dir, fn)) as f:
                    for line in f:
                        try:
                            rec = json.loads(line)
                        except ValueError:
                            continue
                        if rec.get("xid") is not None:
                            xids.add(int(rec["xid"]))
        dump("xact.jsonl",
             "SELECT x, (fault.xact(x)).* FROM unnest(%s::bigint[]) x ORDER BY x",
             ["xid", "status", "commit"], (sorted(xids),))
        self.meta["persistence"] = [list(r) for r in c.execute(
            "SELECT c.relname, c.relkind::text, c.relpersistence::text FROM pg_class c"
            " WHERE c.relnamespace = 'distlock'::regnamespace"
            " AND c.relkind IN ('r', 'S', 'i', 'p') ORDER BY 1").fetchall()]
        # What would send claims and acknowledgements down the SQL path
        # whatever distlock.direct_path says (src/tables.c, dl_jobs_open()):
        # a trigger (internal ones too) other than distlock's own
        # jobs_pending firing always (src/tables.c, jobs_not_plain()), a rule or
        # forced row security on distlock's tables.  There must be none.
        self.meta["diverters"] = [list(r) for r in c.execute(
            "SELECT c.relname, 'trigger', t.tgname FROM pg_trigger t"
            " JOIN pg_class c ON c.oid = t.tgrelid"
            " WHERE c.relnamespace = 'distlock'::regnamespace"
            " AND NOT (t.tgfoid = 'distlock.jobs_pending()'::regprocedure"
            "  AND t.tgenabled = 'A')"
            " UNION ALL SELECT c.relname, 'rule', r.rulename FROM pg_rewrite r"
            " JOIN pg_class c ON c.oid = r.ev_class"
            " WHERE c.relnamespace = 'distlock'::regnamespace AND c.relkind = 'r'"
            " UNION ALL SELECT c.relname, 'forced row security', '' FROM pg_class c"
            " WHERE c.relnamespace = 'distlock'::regnamespace AND c.relkind = 'r'"
            " AND c.relforcerowsecurity ORDER BY 1, 2, 3").fetchall()]
        self.meta["pgss_queries"] = self.pgss_texts
        # test_decoding prints 32-bit transaction ids; the clients' are
        # xid8.  A fresh cluster is in epoch 0, where the two agree.
        self.meta["xid_epoch"] = c.execute(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint >> 32").fetchone()[0]
        self.meta["end_us"] = c.execute("SELECT fault.us(clock_timestamp())").fetchone()[0]
        self.read_slot(c)
        c.close()
        with open(os.path.join(self.dir, "meta.json"), "w") as f:
            json.dump(self.meta, f, indent=1, default=str)


# ---------------------------------------------------------------------------
# Advisory locks versus distlock leases through PgBouncer (transaction mode).
# ---------------------------------------------------------------------------

def run_advisory(a):
    pool = "host=127.0.0.1 port=%d dbname=fault user=postgres connect_timeout=3" % a.pool_port
    direct = "host=127.0.0.1 port=%d dbname=fault user=postgres connect_timeout=3" % a.port
    out = {}

    def conn(name):
        return psycopg.connect(pool, autocommit=True, prepare_threshold=None,
                               application_name=name)

    # 1. Deterministic: A takes a session advisory lock; B runs a transaction
    # (so it holds the server connection A used); A unlocks.
    key = 6006
    A, B = conn("adv-A"), conn("adv-B")
    a_ok, a_pid = A.execute("SELECT pg_try_advisory_lock(%s), pg_backend_pid()", (key,)).fetchone()
    B.execute("BEGIN")
    b_pid = B.execute("SELECT pg_backend_pid()").fetchone()[0]
    b_ok, b_pid2 = B.execute("SELECT pg_try_advisory_lock(%s), pg_backend_pid()", (key,)).fetchone()
    u_ok, u_pid = A.execute("SELECT pg_advisory_unlock(%s), pg_backend_pid()", (key,)).fetchone()
    B.execute("COMMIT")
    with psycopg.connect(direct, autocommit=True) as h:
        left = h.execute("SELECT pid FROM pg_locks WHERE locktype = 'advisory'"
                         " AND objid = %s", (key,)).fetchall()
    out["demo"] = dict(a_lock=a_ok, a_pid=a_pid, b_pid=b_pid, b_lock=b_ok,
                       unlock=u_ok, unlock_pid=u_pid,
                       still_held_by=[r[0] for r in left])
    # The same moves with a distlock lease.  (B's transaction only pins the
    # backend A used: a try_acquire inside it would keep the lock row locked
    # until it ends, as every distlock decision does.)
    ta, ta_pid = A.execute("SELECT distlock.try_acquire('adv-demo', 'A', '30 seconds'),"
                           " pg_backend_pid()").fetchone()
    tb = B.execute("SELECT distlock.try_acquire('adv-demo', 'B', '30 seconds')").fetchone()[0]
    B.execute("BEGIN")
    pin = B.execute("SELECT pg_backend_pid()").fetchone()[0]
    ra, ra_pid = A.execute("SELECT distlock.release('adv-demo', 'A'),"
                           " pg_backend_pid()").fetchone()
    B.execute("COMMIT")
    tb2 = B.execute("SELECT distlock.try_acquire('adv-demo', 'B', '30 seconds')").fetchone()[0]
    B.execute("SELECT distlock.release('adv-demo', 'B')")
    out["demo_lease"] = dict(a_token=ta, a_pid=ta_pid, b_while_held=tb, pinned=pin,
                             a_release=ra, release_pid=ra_pid, b_after=tb2)
    A.close()
    B.close()

    # 2. Measured: 8 clients, each in a loop: lock, critical section of
    # 1-5 ms, unlock -- first with a session advisory lock, then with a lease.
    def trial(kind, seconds=4.0, clients=8):
        rng = random.Random(a.seed)
        sections, unlock_false, errors = [], [0], [0]
        lock = threading.Lock()
        end = now_mono() + seconds

        def loop(i):
            c = conn("adv-%s-%d" % (kind, i))
            owner = "c%d" % i
            while now_mono() < end:
                try:
                    if kind == "advisory":
                        got = c.execute("SELECT pg_try_advisory_lock(7007)").fetchone()[0]
                    else:
                        got = c.execute("SELECT distlock.try_acquire('adv-trial', %s,"
                                        " '30 seconds')", (owner,)).fetchone()[0] is not None
                    if not got:
                        time.sleep(rng.uniform(0.0005, 0.002))
                        continue
                    t_in = now_mono()
                    time.sleep(rng.uniform(0.001, 0.005))
                    t_out = now_mono()
                    if kind == "advisory":
                        ok = c.execute("SELECT pg_advisory_unlock(7007)").fetchone()[0]
                    else:
                        ok = c.execute("SELECT distlock.release('adv-trial', %s)",
                                       (owner,)).fetchone()[0]
                    with lock:
                        sections.append((t_in, t_out, i))
                        if not ok:
                            unlock_false[0] += 1
                except psycopg.Error:
                    with lock:
                        errors[0] += 1
            c.close()

        ths = [threading.Thread(target=loop, args=(i,)) for i in range(clients)]
        for t in ths:
            t.start()
        for t in ths:
            t.join(timeout=seconds + 30)
        sections.sort()
        overlaps = 0
        max_end, max_who = -1.0, None
        for t_in, t_out, who in sections:
            if t_in < max_end and who != max_who:
                overlaps += 1
            if t_out > max_end:
                max_end, max_who = t_out, who
        with psycopg.connect(direct, autocommit=True) as h:
            leaked = h.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                               " AND objid = 7007").fetchone()[0]
            h.execute("SELECT pg_terminate_backend(pid) FROM pg_locks"
                      " WHERE locktype = 'advisory' AND objid = 7007")
        return dict(sections=len(sections), overlaps=overlaps,
                    unlock_false=unlock_false[0], errors=errors[0],
                    left_held=leaked)

    out["advisory"] = trial("advisory")
    out["lease"] = trial("lease")
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--scenario", required=True, choices=sorted(SCENARIOS))
    r.add_argument("--dir", required=True)
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--pool-port", type=int)
    r.add_argument("--cluster-dir", required=True)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--soak", action="store_true")
    r.add_argument("--set", help="JSON object overriding scenario parameters")
    r.add_argument("--path", choices=["direct", "sql"], default="direct",
                   help="the queue path the cluster is set up for"
                   " (sql: distlock.direct_path = off in postgresql.conf)")
    r.add_argument("--delete-completed", action="store_true",
                   help="the cluster runs with distlock.delete_completed = on in postgresql.conf")
    for role in ("locker", "worker"):
        c = sub.add_parser(role)
        c.add_argument("--cid", required=True)
        c.add_argument("--inc", type=int, required=True)
        c.add_argument("--dir", required=True)
        c.add_argument("--dsn", required=True)
        c.add_argument("--seed", type=int, required=True)
        c.add_argument("--names", default="[]")
        c.add_argument("--max-time", type=float, default=120)
        c.add_argument("--pool", action="store_true")
    v = sub.add_parser("advisory")
    v.add_argument("--port", type=int, required=True)
    v.add_argument("--pool-port", type=int, required=True)
    v.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    if a.cmd == "locker":
        run_locker(a)
    elif a.cmd == "worker":
        run_worker(a)
    elif a.cmd == "advisory":
        run_advisory(a)
    else:
        o = Orchestrator(a)
        try:
            o.run()
        finally:
            o.kill_all()


if __name__ == "__main__":
    main()
