#!/usr/bin/python3
"""test/failover/failover.py -- the fault suite's workload through a failover.

    failover.py run --scenario NAME --dir DIR --topology SCRIPT --topo-dir TDIR
                    [--seed N] [--soak]
    failover.py waiter --kind lock|queue ...      (started by "run")

"run" is test/fault/workload.py's orchestrator with one fault: halfway
through, the primary is killed (immediate stop) and its standby promoted.
The clients (workload.py's lock clients and queue workers) connect with a
libpq multi-host string and target_session_attrs=read-write, and find the
new primary by themselves, as they reconnect after any error.  The topology
is behind SCRIPT (streaming.sh: start, env, kill, promote, open, ...), so
that another HA setup can take its place.

The history is workload.py's, with the server's side stitched from two
logical slots: the old primary's (created at setup, read at the end with
the old primary's data directory started alone) up to the switchpoint of
the new timeline, which is exactly what the standby replayed, then the new
primary's (created right after the promotion, before the gate lets the
clients in).  The failover is recorded as a restart ("kind": "failover")
in meta.json: transaction ids the old primary handed out after the
switchpoint may be handed out again by the new one, as after a crash.
Unknown outcomes are resolved on the new primary.  checker.py judges it;
meta.json's "failover" holds the times and what the checker needs.

The "waiting" scenario puts two waiting calls in flight at the kill: a
CALL distlock.acquire() behind a lease the harness holds, and a
CALL distlock.claim_wait() on an empty queue that the harness fills after
the failover ("waiter" processes, below).
"""

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import time

import psycopg

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True      # no __pycache__ in the checkout
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "fault"))
import workload as W  # noqa: E402

WAIT_LOCK = "wl"                # the lease the lock waiter waits for
WAIT_QUEUE = "fault-wq"         # the queue the job waiter waits on

# Gate numbers run the clients for 12 to 14 s (some 18 s a scenario with
# the servers' start and the check, on 2 cores); soak numbers are bigger.
# The failover comes at failovers[0] * duration; the queue must still hold
# jobs then (the re-delivery check needs some) and drain soon after the
# duration.  Async runs keep the standby's walreceiver stopped for lag_s,
# and longer if need be until lag_tokens tokens were drawn: the sequence
# WAL-logs 32 values ahead, so fewer lost draws could by chance leave no
# loss of its position to see.
COMMON = dict(lock_clients=8, names=8, workers=4, failovers=[0.5], max_time=120,
              floors=dict(grants=100))
SCENARIOS = {
    "sync": dict(gate=dict(COMMON, jobs=6000, duration=14),
                 soak=dict(COMMON, lock_clients=16, names=16, workers=8, jobs=45000,
                           duration=60, max_time=300, floors=dict(grants=600))),
    "async": dict(gate=dict(COMMON, jobs=6000, duration=14,
                            lag_s=1.0, lag_tokens=40, lag_max_s=5.0),
                  soak=dict(COMMON, lock_clients=16, names=16, workers=8, jobs=45000,
                            duration=60, max_time=300, floors=dict(grants=600),
                            lag_s=2.0, lag_tokens=80, lag_max_s=8.0)),
    # Waiting calls in flight at the kill, with fewer other clients.
    "waiting": dict(gate=dict(COMMON, lock_clients=4, names=4, workers=2, jobs=3000,
                              duration=12, waiters=True, holder_ttl_ms=5000,
                              wait_jobs=3, floors=dict(grants=40)),
                    soak=dict(COMMON, lock_clients=8, names=8, workers=4, jobs=14000,
                              duration=30, waiters=True, holder_ttl_ms=5000,
                              wait_jobs=3, floors=dict(grants=150))),
}
# sync's workload on pg_auto_failover (paf-kill, paf-switchover), run 7 s
# longer: its monitor takes 3 to 7 s to promote (autofailover.sh's
# shortened timeouts), during which the clients get nothing done, so that
# as much of the run follows the promotion as in sync's.
SCENARIOS["paf"] = {mode: dict(p, duration=p["duration"] + 7)
                    for mode, p in SCENARIOS["sync"].items()}
for _name, _spec in SCENARIOS.items():
    W.SCENARIOS["failover-" + _name] = dict(title="failover (%s)" % _name, **_spec)


def topo(a, *args):
    """Run a subcommand of the topology script; its output, stripped."""
    r = subprocess.run(["bash", a.topology, args[0], a.topo_dir] + list(args[1:]),
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError("%s %s failed: %s" % (a.topology, args[0], r.stderr.strip()))
    return r.stdout.strip()


def lsn(text):
    hi, lo = text.split("/")
    return int(hi, 16) << 32 | int(lo, 16)


class Failover(W.Orchestrator):
    def __init__(self, a):
        super().__init__(a)
        env = dict(ln.split("=", 1) for ln in topo(a, "env").splitlines())
        tail = " dbname=fault user=postgres connect_timeout=3"
        self.direct = env["ADMIN_DSN"] + tail          # Unix sockets: past the gate
        self.client_dsn = env["CLIENT_DSN"] + tail
        self.h = W.Harness(self.direct)
        self.fo = dict(mode=a.mode, topology=os.path.basename(a.topology))
        self.meta["failover"] = self.fo

    def setup(self):
        super().setup()
        if self.p.get("waiters"):
            self.h.q("INSERT INTO fault.resource (name) VALUES (%s)", (WAIT_LOCK,),
                     fetch=None)

    def beats_ahead_s(self):
        """How long a session may outlive its last heartbeat's promise after
        a failover: with shared memory (distlock preloaded, or the DSM
        registry of 17 and later) heartbeats write the row ahead by three
        ttls, at most distlock.heartbeat_persist_ahead (src/beat.c)."""
        shm, ahead_ms = self.h.q(
            "SELECT current_setting('server_version_num')::int >= 170000"
            " OR 'distlock' = ANY (string_to_array(replace("
            "current_setting('shared_preload_libraries'), ' ', ''), ',')),"
            " (SELECT setting::int FROM pg_settings"
            "   WHERE name = 'distlock.heartbeat_persist_ahead')",
            fetch="one")
        ms = 300000 if ahead_ms is None else ahead_ms    # the default
        return min(3 * W.SESSION_TTL_S, ms / 1000.0) if shm else 0.0

    def mark(self, what):
        self.fo[what + "_s"] = round(W.now_mono() - self.t_kill, 3)

    def do_failover(self):
        p = self.p
        if p.get("waiters"):
            self.start_waiters()
        self.pgss_sample("failover")
        self.fo["beats_ahead_s"] = ahead = self.beats_ahead_s()
        if self.a.mode == "async":
            # Grants acknowledged while the standby hears nothing are lost.
            # The lag outlasts the sessions' rows (a ttl, and the margin
            # heartbeats write them ahead by), so that the workers' sessions
            # die with the primary and their jobs, whose acknowledgements
            # the lag lost, come back.
            lag_s = max(p["lag_s"], W.SESSION_TTL_S + ahead + 0.5)
            lag_max_s = max(p["lag_max_s"], lag_s + 3.0)
            seq = "SELECT last_value FROM distlock.token_seq"
            self.fo["walreceiver"] = int(topo(self.a, "lag-pause"))
            t_pause, s0 = W.now_mono(), self.h.q(seq, fetch="one")[0]
            while W.now_mono() - t_pause < lag_max_s:
                drawn = self.h.q(seq, fetch="one")[0] - s0
                if W.now_mono() - t_pause >= lag_s and drawn >= p["lag_tokens"]:
                    break
                time.sleep(0.05)
            self.fo["lag_tokens_drawn"] = drawn
        # A worker dies with the primary, holding jobs: they must come back.
        victim = self.stop_job_holder()
        before = self.h.server_us()
        self.t_kill = W.now_mono()
        if self.a.mode == "async":
            self.fo["lag_s"] = round(self.t_kill - t_pause, 3)
        topo(self.a, "kill")
        self.mark("killed")
        if victim is not None:
            os.kill(victim.popen.pid, signal.SIGKILL)
            victim.popen.wait()
            self.fault("kill", c=victim.cid, inc=victim.inc, pid=victim.popen.pid)
            self.spawn("worker", victim.idx, victim.inc + 1)
        if self.a.mode == "async":
            topo(self.a, "lag-resume")
        topo(self.a, "promote")
        self.mark("promoted")
        after = self.h.server_us()
        # the new primary's side of the history, before any client is in
        self.fo["new_slot_lsn"] = self.h.q(
            "SELECT lsn::text FROM pg_create_logical_replication_slot("
            "'fault', 'test_decoding')", fetch="one")[0]
        topo(self.a, "open")
        self.mark("open")
        self.fo.update(kill_us=before, promoted_us=after, open_us=self.h.server_us())
        self.fault("failover", mode=self.a.mode, before_us=before, after_us=after)
        # For the checker a restart at the promotion: an operation begun
        # before it ran on the old primary (the kill lands a little after
        # kill_us), and owns nothing committed after it under the same
        # transaction id.  No client is let in before after_us is read.
        self.restarts.append(dict(kind="failover", before_us=after, after_us=after))
        if p.get("waiters"):
            n = p["wait_jobs"]
            for _ in range(20):     # the harness's own connection comes back first
                r = self.track("enqueue",
                               "(SELECT count(distlock.enqueue(%s, jsonb_build_object('n', g)))"
                               " FROM generate_series(1, %s) g)", (WAIT_QUEUE, n),
                               dict(lo=1, hi=n))
                if r["outcome"] == "ok":
                    break
                time.sleep(0.05)
            self.fo["wait_jobs_enqueued"] = n if r["outcome"] == "ok" else 0

    def stop_job_holder(self):
        """SIGSTOP a worker that holds running jobs; it is killed once the
        primary is.  Its jobs come back when its session has expired: the
        checker asserts how soon after the promotion."""
        ahead = self.fo.get("beats_ahead_s", 0.0)
        self.fo["redelivery_bound_s"] = W.SESSION_TTL_S + ahead + W.REAP_S + 1.5
        self.fo["redelivery_bound_why"] = (
            "the session ttl %.1f s and the %.1f s its row is written ahead of it (heartbeats"
            " in shared memory), by when every session that the primary's death or"
            " its worker's ended has expired, + the reap interval %.1f s + 1.5 s for"
            " the gate and the workers to reconnect and claim"
            % (W.SESSION_TTL_S, ahead, W.REAP_S))
        held = ("SELECT s.owner FROM distlock.jobs j"
                " JOIN distlock.sessions s ON s.id = j.session_id"
                " WHERE j.status = 'running' AND s.owner LIKE 'W%%'")
        for _ in range(20):
            by_pid = {p.popen.pid: p for p in self.live_procs("worker")}
            pids = {int(o.split("@")[1]) for (o,) in self.h.q(held) or []} & set(by_pid)
            if not pids:
                time.sleep(0.05)
                continue
            p = by_pid[self.rng.choice(sorted(pids))]
            os.kill(p.popen.pid, signal.SIGSTOP)
            # an acknowledgement it had sent may still commit: look again
            time.sleep(0.05)
            if p.popen.pid in {int(o.split("@")[1]) for (o,) in self.h.q(held) or []}:
                return p
            os.kill(p.popen.pid, signal.SIGCONT)
        return None

    def start_waiters(self):
        """A lease the harness holds, a lock waiter behind it, a job waiter
        on an empty queue; returns once both wait in their CALL."""
        ttl = self.p["holder_ttl_ms"]
        r = self.track("acquire", "distlock.try_acquire(%s, %s, %s)",
                       (WAIT_LOCK, "H.holder", W.ms(ttl)),
                       dict(name=WAIT_LOCK, owner="H.holder", ttl=ttl * 1000))
        self.fo["holder_token"] = r.get("r")
        for kind, cid in (("lock", "WL0"), ("queue", "WQ0")):
            cmd = [sys.executable, os.path.abspath(__file__), "waiter", "--kind", kind,
                   "--cid", cid, "--inc", "1", "--dir", self.dir, "--dsn", self.client_dsn,
                   "--seed", str(self.a.seed), "--max-time", str(self.max_time),
                   "--jobs", str(self.p["wait_jobs"])]
            log = open(os.path.join(self.dir, "client-%s.log" % cid), "w")
            po = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
            log.close()
            with open(os.path.join(self.dir, "pids"), "a") as f:
                f.write("%d\n" % po.pid)
            pr = W.Proc("waiter", 0, 1, po)
            pr.cid = cid
            self.procs.append(pr)
        for _ in range(100):
            n = self.h.q("SELECT count(*) FROM pg_stat_activity WHERE state = 'active'"
                         " AND application_name IN ('fault-WL0-call', 'fault-WQ0-call')"
                         " AND query LIKE 'CALL %%'", fetch="one")[0]
            if n == 2:
                break
            time.sleep(0.05)
        self.fo["waiting_at_kill"] = n
        time.sleep(1.2)     # the job waiter heartbeats its 2 s session meanwhile

    def read_slot(self, c):
        """The old primary's changes up to the switchpoint, then the new
        primary's.  A transaction is on the new timeline if its commit
        record ends at or before the switchpoint (test_decoding's COMMIT
        line carries the end of the record)."""
        t0 = W.now_mono()
        tli, switch = topo(self.a, "switchpoint").split()
        self.fo.update(timeline=int(tli), switchpoint=switch)
        lines, kept, lost = [], 0, []
        with psycopg.connect(topo(self.a, "old-primary") + " dbname=fault user=postgres",
                             autocommit=True) as oc:
            xact = []
            for ln in W.peek_slot(oc):
                xact.append(ln)
                if ln["data"].startswith("COMMIT "):
                    if lsn(ln["lsn"]) <= lsn(switch):
                        lines.extend(xact)
                        kept += 1
                    else:
                        lost.append((ln["xid"], (ln["lsn"], ln["data"])))
                    xact = []
        old = len(lines)
        lines.extend(W.peek_slot(c))
        # An old primary that followed the new one (a switchover) has the
        # new timeline's transactions too: only the others were lost.
        # (the commit's LSN and its line, which has the commit time: LSNs
        # alone coincide across the two timelines)
        new_commits = {(ln["lsn"], ln["data"]) for ln in lines[old:]
                       if ln["data"].startswith("COMMIT ")}
        followed = sum(1 for _, at in lost if at in new_commits)
        lost = [x for x, at in lost if at not in new_commits]
        with open(os.path.join(self.dir, "wal.jsonl"), "w") as f:
            for ln in lines:
                f.write(json.dumps(ln, separators=(",", ":")) + "\n")
        self.fo.update(old_commits_kept=kept, old_commits_after_switch=len(lost),
                       old_xids_after_switch=lost, old_commits_followed=followed,
                       old_lines=old, new_lines=len(lines) - old)
        self.meta["wal_lines"] = len(lines)
        self.meta["wal_read_s"] = round(W.now_mono() - t0, 3)


# ---------------------------------------------------------------------------
# Waiters: a waiting call in flight at the kill.  A CALL runs outside a
# transaction block, so its operation record cannot start with
# pg_current_xact_id(): the server clock is read before and after the call
# on the same connection, and the transaction id from the xmin of the row
# version it wrote (the lease, the claimed jobs), which nobody else changes
# before the reading.  A call cut by the kill is of unknown outcome, with no
# transaction id.  What a call commits while it waits (heartbeats of its
# session, reaps in passing) checker.py gives to the call in flight
# (attribute_waits()).
# ---------------------------------------------------------------------------

def run_waiter(a):
    stop, rng, owner, hist, deadline, cl, parent = W.client_start(a)
    conn = [None]

    def alive():
        return not stop.is_set() and W.now_mono() < deadline and os.getppid() == parent

    def waiting(kind, sql, params, fields, xid_sql):
        rec = dict(k="op", c=a.cid, i=a.inc, s=cl.next_seq(), op=kind, wait=True)
        rec.update(fields)
        now = "SELECT fault.us(clock_timestamp())"
        try:
            if conn[0] is None or conn[0].closed or conn[0].broken:
                conn[0] = psycopg.connect(a.dsn, autocommit=True,
                                          application_name="fault-%s-call" % a.cid)
            c = conn[0]
            rec["t0"] = c.execute(now).fetchone()[0]
            hist.write(dict(rec, k="pre"))     # if killed in the call: cut short
            r = c.execute(sql, params).fetchone()[0]
            rec["t1"] = c.execute(now).fetchone()[0]
            rec["r"], xid_params = xid_sql(r)
            if xid_params is not None:
                rec["xid"] = c.execute(*xid_params).fetchone()[0]
            rec["outcome"] = "ok"
        except psycopg.Error as e:
            rec["err"] = W.errcode(e)
            rec["outcome"] = "info" if "t0" in rec else "fail"
            try:
                conn[0].close()
            except Exception:
                pass
            conn[0] = None
            time.sleep(0.1)
        hist.write(rec)
        return rec

    # Both wait 10 s at most: the test database's statement_timeout is 15 s.
    if a.kind == "lock":
        ttl = 5000
        while alive():
            r = waiting("acquire", "CALL distlock.acquire(%s, %s, %s, NULL, NULL, '10 s', NULL)",
                        (WAIT_LOCK, owner, W.ms(ttl)),
                        dict(name=WAIT_LOCK, owner=owner, ttl=ttl * 1000),
                        lambda tok: (tok, None if tok is None else (
                            "SELECT xmin::text::bigint FROM distlock.locks WHERE name = %s"
                            " AND owner = %s AND token = %s", (WAIT_LOCK, owner, tok))))
            if r["outcome"] == "ok" and r.get("r") is not None:
                tok = r["r"]
                cl.op("write", W.HEAD + "distlock.fence(%s, %s)" + W.TAIL, (WAIT_LOCK, tok),
                      dict(name=WAIT_LOCK, owner=owner, token=tok),
                      post=W.fenced_write(WAIT_LOCK, tok, owner))
                cl.op("release", W.HEAD + "distlock.release(%s, %s)" + W.TAIL,
                      (WAIT_LOCK, owner), dict(name=WAIT_LOCK, owner=owner, token=tok))
                break
    else:
        sid, done = None, 0
        while alive():
            if sid is None:
                # ttl 2 s: the call heartbeats the session while it waits
                # (once half the ttl is left), the kill comes in between
                r = cl.op("open", W.HEAD + "distlock.session_open(%s, %s)::text" + W.TAIL,
                          (datetime.timedelta(seconds=2), owner), dict(owner=owner))
                sid = r.get("r") if r["outcome"] == "ok" else None
                continue
            r = waiting("claim", "CALL distlock.claim_wait(%s, %s, 10, '10 s', NULL)",
                        (WAIT_QUEUE, sid), dict(sid=sid, n=10),
                        lambda jobs: (sorted(j["id"] for j in jobs or []), (
                            "SELECT min(xmin::text::bigint) FROM distlock.jobs"
                            " WHERE id = ANY(%s)", ([j["id"] for j in jobs],))
                            if jobs else None))
            if r.get("err") in ("55000", "42704"):
                sid = None          # the session ended: a new one
            for job in r.get("r") or []:
                def effect(conn_, acked, job=job):
                    if acked:
                        conn_.execute("INSERT INTO fault.effects (job_id, session_id,"
                                      " worker) VALUES (%s, %s, %s)", (job, sid, owner))
                    return dict(effect=True) if acked else {}
                # (its first call may find the old primary's connection
                # broken; complete() is idempotent, as the workers rely on)
                for _ in range(5):
                    ack = cl.op("ack", W.HEAD + "distlock.complete(%s, %s)" + W.TAIL,
                                (job, sid), dict(sid=sid, job=job), post=effect)
                    if ack["outcome"] == "ok":
                        break
                done += 1 if ack["outcome"] == "ok" and ack.get("r") else 0
            if done >= a.jobs:
                break
        if sid is not None:
            cl.op("close", W.HEAD + "distlock.session_close(%s)" + W.TAIL, (sid,),
                  dict(sid=sid))
    cl.drop()


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--scenario", required=True, choices=sorted(SCENARIOS))
    r.add_argument("--dir", required=True)
    r.add_argument("--topology", required=True)
    r.add_argument("--topo-dir", required=True)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--soak", action="store_true")
    r.add_argument("--set", help="JSON object overriding scenario parameters")
    w = sub.add_parser("waiter")
    w.add_argument("--kind", choices=["lock", "queue"], required=True)
    for arg in ("--cid", "--dir", "--dsn"):
        w.add_argument(arg, required=True)
    w.add_argument("--inc", type=int, default=1)
    w.add_argument("--seed", type=int, default=1)
    w.add_argument("--max-time", type=float, default=120)
    w.add_argument("--jobs", type=int, default=0, help="the queue waiter's, then it stops")
    a = ap.parse_args()
    if a.cmd == "waiter":
        a.pool = False
        run_waiter(a)
        return
    a.mode = dict(ln.split("=", 1) for ln in topo(a, "env").splitlines())["MODE"]
    # what W.Orchestrator reads: the scenario's name in W.SCENARIOS, the
    # queue path (the default), no pool, and a port it does not use
    a.scenario, a.path, a.pool_port, a.port = "failover-" + a.scenario, "direct", None, 0
    a.cluster_dir = a.topo_dir
    o = Failover(a)
    try:
        o.run()
    finally:
        o.kill_all()


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    main()
