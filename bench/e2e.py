#!/usr/bin/python3
"""bench/e2e.py -- end to end: distlock's job cycle against graphile-worker's.

Run by bench/run.sh after bench.py, on the same cluster (distlock
preloaded); "make bench WORKLOADS=e2e" runs only this.  It can also be run
by hand against any cluster where bench/setup.sql has been loaded, with the
libpq environment (PGHOST, PGPORT, PGUSER = a superuser) pointing at it.  It
measures and never asserts.

graphile-worker is the Node.js queue that users would pick instead.  With 4
and 16 workers, the ways below of working through a queue of no-op jobs take
turns in ROUNDS interleaved rounds (their order rotated every round), on the
same server, with synchronous_commit on:

  graphile-worker, one job       its run() with concurrency N and its
                                 defaults: each worker fetches one job
                                 (get_job) and deletes it when its task
                                 returns
  graphile-worker, local queue   the same with its local queue
                                 (localQueue.size = 10 x N: as many jobs
                                 locked at once as N distlock workers with
                                 batches of 10) and batched completion
                                 (completeJobBatchDelay = 0)
  distlock, one job per call     N pgbench clients, each looping claim(q,
                                 sid, 1) + complete(id, sid)
                                 (job_distlock.sql, as bench.py's job1)
  distlock, batches of 10        claim(q, sid, 10) + complete_batch(ids,
                                 sid) (as bench.py's job10)
  distlock, batches of 10 in     N pgbench clients, each looping
  one call                       complete_batch_and_claim(ids, sid): the
                                 batch in hand acknowledged and the next
                                 claimed in one transaction
                                 (job_distlock_bac.sql, as bench.py's)
  distlock, one job per call     N pgbench clients, each looping
  in one call                    complete_and_claim(id, sid): the job in
                                 hand acknowledged and the next claimed in
                                 one transaction (job_distlock_cc.sql, as
                                 bench.py's complete_and_claim)
  distlock, ..., delete_completed the two "in one call" rows again with
                                 distlock.delete_completed for the workers'
                                 role: each acknowledgement deletes its
                                 job, as graphile-worker's completion does
  distlock, one pool             one pgbench client looping claim(q, sid,
                                 10 x N) + complete_batch: the shape of
                                 graphile-worker's local queue (one fetch
                                 of 10 x N jobs, completions in batches),
                                 shown for information; issue 17's target
                                 is set on the batches of 10
  floor: one / two durable       N pgbench clients, each looping one or
  commits a cycle                two transactions that each update one
                                 row of its own by key (bench.py's
                                 floor_commit.sql): cycles per second, the
                                 most any cycle of that many commits can
                                 do here; each target's report line says
                                 how far above graphile-worker that is

graphile-worker runs in one Node process (bench/graphile/e2e.mjs, through
install.sh's Node), its task an empty async function; distlock's workers
are pgbench's clients, a C program, so the client side costs distlock less
CPU than Node costs graphile-worker, on the same 2 cores as the server.

Every round starts alike: both job tables truncated, the variant's queue
filled with the same jobs (payload {"to": "user<n>@example.com"}; distlock
through INSERT as bench.py fills it, graphile-worker through its
graphile_worker.add_jobs) with more than the round can take, vacuumed,
then a CHECKPOINT.  The workers start; after WARM_SECS the window opens:
jobs completed are counted in the tables at its start and end (distlock:
rows with status completed, and rows that left the table with
delete_completed; graphile-worker deletes a completed job, so the rows that
left its table), over ROUND_SECS.  A round whose queue ran
low is run again with a larger fill.

The semantics differ: graphile-worker completes a job with a plain DELETE
of its row, with no check that the worker is still alive or still holds
the job, so a worker that was presumed dead and whose job was handed to
another still deletes it; distlock's complete and complete_batch check,
under the session's use lock, that the session is live and the job is
still its own, and keep the job's row as history.

Prints a table and issue 17's end-to-end targets, appends them to
bench/results/latest.txt and writes bench/results/e2e-<time>.csv.

Environment: E2E_WORKERS ("4 16"), WARM_SECS (1), GRAPHILE_DIR
(bench/graphile/install.sh's directory; unset or empty leaves
graphile-worker's rows out), and bench.py's ROUNDS and ROUND_SECS.
"""

import csv
import datetime
import os
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import bench  # noqa: E402  (Db, fills, pgbench command lines, targets)
import wake  # noqa: E402  (the graphile-worker process)

WORKERS = [int(n) for n in os.environ.get("E2E_WORKERS", "4 16").split()]
WARM = float(os.environ.get("WARM_SECS", "1"))
SECS = bench.SECS
BATCH = 10
APP = "e2e-distlock"
GROUP = "e2e"
SYNC = "on"
TABLES = "distlock.jobs" + (", graphile_worker._private_jobs" if wake.GRAPHILE_DIR else "")

log = bench.log


class Variant:
    """One way of working through the queue: graphile-worker in a mode of
    e2e.mjs, distlock's job cycle with batches of mode jobs, or the floor
    of a cycle of mode durable commits (bench.py's, floor_commit.sql)."""

    def __init__(self, name, kind, mode, fill_rate, pool=False, script="job_distlock.sql",
                 keep=True):
        self.name, self.kind, self.mode, self.fill_rate = name, kind, mode, fill_rate
        self.pool = pool    # distlock: one client claiming mode x N jobs
        self.script = script
        self.keep = keep    # distlock: False runs with distlock.delete_completed
        # distlock: the transactions of a cycle (claim, then acknowledge; or
        # both in one call)
        self.commits = 2 if script == "job_distlock.sql" else 1

    def pgbench(self, n):
        """(the pgbench variant, its clients) for n workers."""
        if self.kind == "floor":
            return bench.Variant(self.name, self.script, "floor", {"commits": self.mode}), n
        batch, clients = (self.mode * n, 1) if self.pool else (self.mode, n)
        return (bench.Variant(self.name, self.script, "distlock",
                              {"batch": batch, "have_sid": 0, "jid": 0}), clients)

    def fill(self, db, n):
        db.run(f"TRUNCATE {TABLES}")
        if self.kind == "floor":
            db.run("VACUUM floor_rows")
        elif self.kind == "distlock":
            bench.fill_distlock(db, n)
        else:
            db.run(f"""
                SELECT count(*) FROM graphile_worker.add_jobs(ARRAY(
                    SELECT ROW('e2e', {bench.PAYLOAD_SQL}::json, NULL, now(), 5, NULL, 0,
                               NULL)::graphile_worker.job_spec
                      FROM generate_series(1, %s) g))""", (n,))
        db.run(f"VACUUM ANALYZE distlock.sessions, {TABLES}")
        db.run("CHECKPOINT")

    def state(self, db):
        """(jobs completed so far, up to a constant; jobs left).  For the
        floor: cycles, each counted once per row it updated, and no end."""
        if self.kind == "floor":
            return db.one("SELECT sum(n)::bigint FROM floor_rows") // self.mode, 10 ** 9
        if self.kind == "distlock":
            # a job deleted by its acknowledgement has left the table
            return db.run("SELECT count(*) FILTER (WHERE status = 'completed') - count(*),"
                          " count(*) FILTER (WHERE status = 'pending') FROM distlock.jobs")[0]
        left = db.one("SELECT count(*) FROM graphile_worker._private_jobs")
        return -left, left

    def start(self, db, n):
        if self.kind == "graphile":
            return wake.Graphile(n, {}, "e2e.mjs", (self.mode,))
        # pgbench is stopped once the window closes; its messages go to a
        # file, which cannot fill up and stop it as a pipe would
        err = tempfile.TemporaryFile("w+")
        variant, clients = self.pgbench(n)
        # for the sessions pgbench opens, which read it at connection
        db.run("ALTER ROLE app " + ("RESET distlock.delete_completed" if self.keep
                                    else "SET distlock.delete_completed = on"))
        p = subprocess.Popen(bench.pgbench_cmd(variant, clients, int(WARM + SECS + 60)),
                             stdout=subprocess.DEVNULL, stderr=err,
                             env=dict(os.environ, PGAPPNAME=APP))
        p.err_file = err
        if not wake.wait_for_backends(db, APP, clients):
            p.kill()
            raise SystemExit(f"{self.name}: pgbench did not connect: {pgbench_err(p)}")
        return p

    def stop(self, db, w):
        if self.kind == "graphile":
            w.close()
            return f", {w.handled} handled" if w.handled is not None else ""
        w.terminate()
        err = pgbench_err(w)
        wake.terminate(db, APP)
        db.run("ALTER ROLE app RESET distlock.delete_completed")
        return f"; pgbench: {err[-300:]}" if err else ""


def pgbench_err(p):
    """What pgbench wrote to its stderr file."""
    p.wait()
    p.err_file.seek(0)
    return p.err_file.read().strip()


VARIANTS = [
    Variant("graphile-worker, one job", "graphile", "one", 3000),
    Variant("graphile-worker, local queue + batched completion", "graphile", "batched", 25000),
    Variant("distlock, one job per call", "distlock", 1, 5000),
    Variant(f"distlock, batches of {BATCH}", "distlock", BATCH, 30000),
    Variant(f"distlock, one pool: claim of {BATCH} x N + complete_batch", "distlock", BATCH,
            40000, pool=True),
    Variant(f"distlock, batches of {BATCH} in one call", "distlock", BATCH, 40000,
            script="job_distlock_bac.sql"),
    Variant("distlock, one job per call, in one call", "distlock", 1, 8000,
            script="job_distlock_cc.sql"),
    # graphile-worker's retention: none
    Variant(f"distlock, batches of {BATCH} in one call, delete_completed", "distlock", BATCH,
            40000, script="job_distlock_bac.sql", keep=False),
    Variant("distlock, one job per call, in one call, delete_completed", "distlock", 1, 8000,
            script="job_distlock_cc.sql", keep=False),
]
# The floor of a cycle of one and two transactions, each of which changes a
# row durably: cycles per second, not jobs.
FLOORS = {c: Variant(f"floor: {bench.FLOOR_COMMITS[c]} a cycle", "floor", c, 10000,
                     script="floor_commit.sql") for c in (1, 2)}
PAIRS = [  # issue 17's targets: (label, distlock, graphile-worker, goal)
    ("batched mode: distlock batches of 10 vs graphile-worker's local queue",
     VARIANTS[3].name, VARIANTS[1].name, 1.2),
    ("one job per call: distlock vs graphile-worker's one-job mode",
     VARIANTS[2].name, VARIANTS[0].name, 1.5),
    ("batched mode, each batch acknowledged and the next claimed in one call"
     " (complete_batch_and_claim) vs graphile-worker's local queue",
     VARIANTS[5].name, VARIANTS[1].name, 1.2),
    ("one job per call, each job acknowledged and the next claimed in one call"
     " (complete_and_claim) vs graphile-worker's one-job mode",
     VARIANTS[6].name, VARIANTS[0].name, 1.5),
    ("the same batched mode keeping no finished job, as graphile-worker keeps none"
     " (distlock.delete_completed) vs graphile-worker's local queue",
     VARIANTS[7].name, VARIANTS[1].name, 1.2),
    ("the same one-job mode keeping no finished job (distlock.delete_completed)"
     " vs graphile-worker's one-job mode",
     VARIANTS[8].name, VARIANTS[0].name, 1.5),
]


def run_round(db, v, n, est):
    """Fill, start the workers, count the window; (jobs, secs).  A round
    whose queue ran low is run again with four times the fill."""
    for _ in range(3):
        v.fill(db, 10000 + int(est * (WARM + SECS + 3) * 1.5))
        w = v.start(db, n)
        try:
            time.sleep(WARM)
            done0, _ = v.state(db)
            t0 = time.monotonic()
            time.sleep(SECS)
            done1, left = v.state(db)
            t1 = time.monotonic()
        finally:
            note = v.stop(db, w)
        if left >= 1000:
            return done1 - done0, t1 - t0, note
        log(f"    {v.name}: the queue ran low ({left} jobs left); again with a larger fill")
        est = est * 4
    raise SystemExit(f"{v.name}: the queue kept running low")


def ceiling(out, results, num, den):
    """The most variant num could do against den here: the floor of as many
    commits a cycle as num's, times its batch, over den's jobs per second
    (bench.py's shape_ceilings, for the workers of this harness)."""
    v = next(v for v in VARIANTS if v.name == num)
    floor = FLOORS[v.commits]
    parts = bench.ceiling_parts(results, SYNC, WORKERS, (GROUP, floor.name), v.mode,
                                (GROUP, den))
    if parts:
        out.append(f"  - [report] ceiling: the floor of {bench.FLOOR_COMMITS[v.commits]} a cycle"
                   " allows at most " + ", ".join(parts))


def report(results, variants):
    ts = [f"{n} workers" for n in WORKERS]
    out = [f"End to end (bench/e2e.py): jobs completed per second, no-op jobs, synchronous_commit"
           f" {SYNC}, {bench.ROUNDS} round(s) of {SECS} s per variant and worker count;"
           " graphile-worker in one Node process, distlock's workers pgbench clients;"
           " the floor's rows are cycles per second.", "",
           "| variant | " + " | ".join(ts) + " |",
           "| --- | " + " | ".join("---:" for _ in ts) + " |"]
    for v in variants:
        cells = [results.get((SYNC, GROUP, n, v.name)) for n in WORKERS]
        out.append(f"| {v.name} | "
                   + " | ".join(f"{c.ops_per_s():,.0f}" if c else "" for c in cells) + " |")
    out += ["", "Targets (issue 17, end to end against graphile-worker):", ""]
    for label, num, den, goal in PAIRS:
        bench.check_ratio(out, results, label, SYNC, GROUP, WORKERS, num, den, goal)
        ceiling(out, results, num, den)
    # the same shape on both sides, for information: not a target
    parts = [f"{n}: {a / b:.2f}x" for n in WORKERS
             for a, b in [(bench.cell_ops(results, SYNC, GROUP, n, VARIANTS[4].name),
                           bench.cell_ops(results, SYNC, GROUP, n, VARIANTS[1].name))]
             if a is not None and b]
    if parts:
        out.append("- [info] one pool on each side: distlock's claim of 10 x N jobs per call vs"
                   " graphile-worker's local queue of 10 x N: " + ", ".join(parts))
    out += ["", "graphile-worker completes a job with a plain DELETE: no check that its worker"
            " is alive or still holds the job; distlock's complete checks that the session is"
            " live and the job still its own, and keeps the row (with distlock.delete_completed,"
            " deletes it)."]
    return "\n".join(out) + "\n"


def main():
    db = bench.Db()
    variants = ([v for v in VARIANTS if v.kind == "distlock" or wake.GRAPHILE_DIR]
                + list(FLOORS.values()))
    if wake.GRAPHILE_DIR:
        # its schema, before the first fill
        if wake.graphile_node("e2e.mjs", "1", "migrate").wait() != 0:
            raise SystemExit("graphile-worker's migrations failed")
    else:
        log("e2e: GRAPHILE_DIR is not set; graphile-worker's rows are left out")
    bench.reset_sessions(db)
    results, est, rows = {}, {}, []
    log(f"== end to end against graphile-worker, synchronous_commit {SYNC}")
    with bench.synchronous_commit(db, SYNC):
        try:
            for n in WORKERS:
                for rnd in range(bench.ROUNDS):
                    order = variants[rnd % len(variants):] + variants[:rnd % len(variants)]
                    for v in order:
                        jobs, secs, note = run_round(db, v, n, est.get((v.name, n), v.fill_rate))
                        results.setdefault((SYNC, GROUP, n, v.name), bench.Cell()).add(
                            jobs, 0, secs, (0, 0), [])
                        est[(v.name, n)] = max(jobs / secs, 1000)
                        rows.append(dict(workers=n, round=rnd + 1, variant=v.name, jobs=jobs,
                                         secs=round(secs, 3), jobs_per_s=round(jobs / secs, 1)))
                        log(f"  e2e n={n:<2} r{rnd + 1} {v.name:50} {jobs / secs:8.0f}"
                            f" jobs/s{note}")
        finally:
            db.run(f"TRUNCATE {TABLES}")
    text = report(results, variants)
    print(text)
    os.makedirs(bench.RESULTS, exist_ok=True)
    with open(os.path.join(bench.RESULTS, "latest.txt"), "a") as f:
        f.write("\n" + text)
    path = os.path.join(bench.RESULTS,
                        f"e2e-{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}.csv")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    log(f"results: {path}")


if __name__ == "__main__":
    main()
