"""test/scripts/wait.py -- the waiting calls, against a running cluster.

Run by test/scripts/wait.sh, once against a server with distlock preloaded
(waiters woken by the committing transaction, a background worker reaps)
and once without: on PostgreSQL 17 and later the waiters are still woken
(shared memory from the DSM registry, "dsm"), before 17 they look again
every distlock.wait_poll_interval ("poll"):

    wait.py preload|dsm|poll [--basic]

--basic stops after the first cases (a waiting claim woken by another
session's commit, a wait that ends empty, a job that becomes due,
complete_and_claim_wait): what make test runs without preloading before
17, FULL=1 running them all.

Connects with the PG* environment; prints "ok - ..." or "not ok - ..."
lines.  Times are asserted only where the issue states a bound (a cancel
returns within 100 ms) or with wide margins to tell "woken" from "waited
out its wait".
"""

import os
import signal
import subprocess
import sys
import threading
import time
import traceback

import psycopg

MODE = sys.argv[1]
BASIC = "--basic" in sys.argv[2:]
PRELOAD = MODE == "preload"         # a background worker reaps
WOKEN = MODE in ("preload", "dsm")  # waiters are woken
results = []


def stopped(kind, value, tb):
    """An exception no case caught ends the run: one "not ok" line for it,
    which wait.sh's caller counts (the cases after it never ran)."""
    sys.__excepthook__(kind, value, tb)
    line = traceback.extract_tb(tb)[-1].lineno if tb else "?"
    print(f"not ok - [{MODE}] wait.py stopped at line {line}:"
          f" {kind.__name__}: {value}", flush=True)


sys.excepthook = stopped


def check(what, got, want):
    ok = got == want
    print(("ok - " if ok else "not ok - ") + f"[{MODE}] {what}" +
          ("" if ok else f": got {got!r}, expected {want!r}"), flush=True)
    results.append(ok)


def connect(**kw):
    return psycopg.connect(autocommit=True, **kw)


admin = connect()


def one(sql, *args):
    return admin.execute(sql, args).fetchone()[0]


def session(ttl="60 s"):
    return one("SELECT distlock.session_open(%s::interval)", ttl)


def enqueue(queue, run_at=None):
    if run_at is None:
        return one("SELECT distlock.enqueue(%s)", queue)
    return one("SELECT distlock.enqueue(%s, '{}', now() + %s::interval)",
               queue, run_at)


class Call(threading.Thread):
    """A CALL on a connection of its own, timed; .pid is its backend."""

    def __init__(self, sql, args=(), debug=False):
        super().__init__(daemon=True)
        self.conn = connect()
        self.pid = self.conn.info.backend_pid
        self.sql, self.args = sql, args
        self.result = self.error = None
        self.woken = 0
        if debug:
            self.conn.add_notice_handler(self._notice)
            self.conn.execute("SET client_min_messages = debug1")
        self.started = self.ended = None

    def _notice(self, diag):
        if (diag.message_primary or "").startswith("woken for jobs"):
            self.woken += 1

    def run(self):
        self.started = time.monotonic()
        try:
            self.result = self.conn.execute(self.sql, self.args).fetchone()[0]
        except psycopg.Error as e:
            self.error = e.sqlstate
        self.ended = time.monotonic()

    def elapsed(self):
        return self.ended - self.started

    def inside(self):
        """Whether its backend is inside the CALL."""
        return one("SELECT state = 'active' FROM pg_stat_activity"
                   " WHERE pid = %s", self.pid) is True

    def waiting(self):
        """Whether its backend is asleep in the CALL's wait: on its latch
        (wake.c), or in the lock manager's line of a lock's waiters when
        there is no shared memory.  Only being inside the CALL is not
        enough: on a slow server the call can still be on its first look,
        which a check (the acknowledgement committed, the order in line)
        would then race."""
        return one("SELECT state = 'active' AND wait_event_type IN"
                   " ('Extension', 'Lock') FROM pg_stat_activity"
                   " WHERE pid = %s", self.pid) is True


def claim_wait(queue, sid, wait, n=1, debug=False):
    c = Call("CALL distlock.claim_wait(%s, %s, %s, %s::interval)",
             (queue, sid, n, wait), debug)
    c.start()
    return c


def until_waiting(calls, timeout=10):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if all(c.waiting() for c in calls):
            return True
        time.sleep(0.02)
    return False


def in_line(*calls):
    """Start calls one after the other, each asleep in its wait before the
    next starts, so that they wait in that order."""
    for c in calls:
        c.start()
        until_waiting([c])
        time.sleep(0.2)
    return calls


def woken_by(call, act):
    """Once call (started) is asleep in its wait, act(); returns what act
    returned and the seconds from then until call ended."""
    until_waiting([call])
    time.sleep(0.3)
    got = act()
    acted = time.monotonic()
    call.join()
    return got, call.ended - acted


def kept_alive(sid, call):
    """distlock.heartbeat(sid) after call waited with it; if the session is
    gone, a line saying how its row last stood, for the log."""
    alive = one("SELECT distlock.heartbeat(%s)", sid)
    if not alive:
        row = one("SELECT format('last beat %%s s after its open, expiry %%s s"
                  " before now', extract(epoch FROM heartbeat_at - created_at),"
                  " extract(epoch FROM now() - expires_at))"
                  " FROM distlock.sessions WHERE id = %s", sid)
        print(f"# [{MODE}] session {sid} gone after a wait of"
              f" {call.elapsed():.2f} s: {row or 'its row was reaped'}")
    return alive


def ids(jobs):
    return [j["id"] for j in jobs] if jobs is not None else None


admin.execute("CREATE EXTENSION IF NOT EXISTS distlock")
sid = session()

# Work already there: claimed at once, without waiting.
job = enqueue("now")
c = claim_wait("now", sid, "30 s")
c.join()
check("a waiting claim takes a job that is there", ids(c.result), [job])
check("... without waiting for its wait to end", c.elapsed() < 10, True)

# Nothing there: the enqueue's commit (or the next look) wakes the waiter.
c = claim_wait("later", sid, "30 s")
job, took = woken_by(c, lambda: enqueue("later"))
check("a waiting claim gets the job enqueued while it waits", ids(c.result),
      [job])
# woken by the commit: a waiter that missed it would take the job at its
# next look, 5 s after the one before without background maintenance
check("... woken by the enqueue's commit (within 2.5 s of it)", took < 2.5,
      True)

# Nothing comes: an empty array once the wait is over.
c = claim_wait("never", sid, "1 s")
c.join()
check("a wait with nothing to claim returns an empty array", c.result, [])
check("... once the wait is over", c.elapsed() >= 0.95, True)

# A job that becomes due while the claim waits.
job = enqueue("due", "1.5 s")
c = claim_wait("due", sid, "30 s")
c.join()
check("a waiting claim gets a job when it becomes due", ids(c.result), [job])
check("... not before", c.elapsed() >= 1.0, True)
check("... and long before its wait ends", c.elapsed() < 10, True)

# complete_and_claim_wait: the acknowledgement, then a wait in its queue.
first = enqueue("cc")
one("SELECT count(*) FROM distlock.claim('cc', %s)", sid)
c = Call("CALL distlock.complete_and_claim_wait(%s, %s, '{\"ok\": 1}',"
         " 1, '30 s')", (first, sid))
c.start()
until_waiting([c])
time.sleep(0.3)
check("complete_and_claim_wait committed its acknowledgement before waiting",
      one("SELECT status::text FROM distlock.jobs WHERE id = %s", first),
      "completed")
job = enqueue("cc")
c.join()
check("... and claims the next job of the queue", ids(c.result), [job])
if BASIC:
    sys.exit(0 if all(results) else 1)

# While it sleeps: no snapshot, no xid, no lock but its own virtual xid.
c = claim_wait("idle", sid, "60 s")
until_waiting([c])
time.sleep(0.2)
# Sampled 50 times: asleep in (nearly) every sample (polling, it looks for
# a moment 50 times a second), and never with a snapshot, a transaction id
# or a lock but its virtual transaction id while asleep.  A sample reads
# these at different instants (the xmin when the server gathers the
# backends' status, the wait event as it emits the row, the locks in a
# subquery), so one taken as a poll's look ends can pair the look's xmin
# with the sleep after it: a sample that shows something held is taken
# again three times, and counts only if one of those shows it too, as
# one held while asleep would.
def sample():
    return admin.execute(
        "SELECT a.wait_event_type = 'Extension', a.backend_xmin, a.backend_xid,"
        " (SELECT array_agg(locktype::text) FROM pg_locks WHERE pid = a.pid)"
        " FROM pg_stat_activity a WHERE a.pid = %s", (c.pid,)).fetchone()


def holds(r):
    return r[0] and (r[1] is not None or r[2] is not None or
                     r[3] != ["virtualxid"])


samples = []
for _ in range(50):
    r = sample()
    if holds(r):
        again = [sample() for _ in range(3)]
        r = next((a for a in again if holds(a)), again[-1])
    samples.append(r)
    time.sleep(0.013)
asleep = [r for r in samples if r[0]]
print(f"# [{MODE}] asleep in {len(asleep)} of 50 samples")
check("a waiting backend sleeps on its latch",
      len(asleep) >= (50 if WOKEN else 40), True)
check("... with no backend_xmin", [r[1] for r in asleep if r[1] is not None],
      [])
check("... and no transaction id",
      [r[2] for r in asleep if r[2] is not None], [])
check("... and no lock but its virtual transaction id",
      [r[3] for r in asleep if r[3] != ["virtualxid"]], [])

# It costs no CPU while it sleeps.
def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_over_2s(call, what):
    """The CPU time call's backend uses over the next 2 s, printed."""
    before = cpu_seconds(call.pid)
    time.sleep(2)
    used = cpu_seconds(call.pid) - before
    print(f"# [{MODE}] CPU time over 2 s of {what}: {used:.3f} s")
    return used


before = cpu_seconds(c.pid)
time.sleep(5)
used = cpu_seconds(c.pid) - before
print(f"# [{MODE}] CPU time of a waiting backend over 5 s: {used:.3f} s")
# preloaded it only sleeps; polling looks 50 times a second
check("a waiting backend uses next to no CPU over 5 s",
      used <= (0.05 if WOKEN else 0.5), True)

# pg_cancel_backend ends the wait at once.
t0 = time.monotonic()
admin.execute("SELECT pg_cancel_backend(%s)", (c.pid,))
c.join()
check("a cancelled wait fails with 57014", c.error, "57014")
print(f"# [{MODE}] cancel to return: {(c.ended - t0) * 1000:.1f} ms")
check("... within 100 ms", c.ended - t0 < 0.1, True)

# statement_timeout too.
c = Call("CALL distlock.claim_wait(%s, %s, 1, '60 s')", ("idle", sid))
c.conn.execute("SET statement_timeout = '300ms'")
c.start()
c.join()
check("a statement timeout ends the wait with 57014", c.error, "57014")
check("... when it expires", 0.25 <= c.elapsed() < 5, True)

# A client that goes away: its backend ends, without waiting out the wait.
env = dict(os.environ, PGAPPNAME="distlock-wait-gone")
psql = subprocess.Popen(["psql", "-X", "-q", "-c",
                         f"CALL distlock.claim_wait('idle', '{sid}', 1,"
                         " '60 s')"], env=env, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL)
pid = None
for _ in range(200):
    pid = one("SELECT max(pid) FROM pg_stat_activity"
              " WHERE application_name = 'distlock-wait-gone'"
              " AND state = 'active'")
    if pid:
        break
    time.sleep(0.02)
psql.kill()
psql.wait()
t0 = time.monotonic()
gone = False
while time.monotonic() - t0 < 5:
    if not one("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", pid):
        gone = True
        break
    time.sleep(0.02)
check("the backend of a client that went away ends its wait", gone, True)
print(f"# [{MODE}] client gone to backend gone: "
      f"{(time.monotonic() - t0) * 1000:.0f} ms")

# Inside a transaction block a waiting call cannot commit: it refuses to
# wait, and works with wait => '0'.
with connect() as conn:
    conn.execute("BEGIN")
    try:
        conn.execute("CALL distlock.claim_wait('idle', %s, 1, '1 s')", (sid,))
        state = None
    except psycopg.Error as e:
        state = e.sqlstate
    check("claim_wait inside a transaction block raises 25001", state,
          "25001")
    conn.execute("ROLLBACK")
    conn.execute("BEGIN")
    job = enqueue("inside")
    got = conn.execute("CALL distlock.claim_wait('inside', %s, 1, '0')",
                       (sid,)).fetchone()[0]
    check("... and claims without waiting with wait => '0'", ids(got), [job])
    conn.execute("COMMIT")

# 16 waiters, 1 job: 1 claim, the others go on waiting.
waiters = [claim_wait("herd", sid, "6 s", debug=True) for _ in range(16)]
until_waiting(waiters)
time.sleep(0.5)
job = enqueue("herd")
time.sleep(1.0)
done = [w for w in waiters if not w.is_alive()]
check("16 waiters and 1 job: one claims it", [ids(w.result) for w in done],
      [[job]])
check("... and the other 15 keep waiting",
      sum(1 for w in waiters if w.is_alive() and w.inside()), 15)
for w in waiters:
    w.join()
check("... until their wait ends, with nothing",
      sorted(len(w.result) for w in waiters), [0] * 15 + [1])
if WOKEN:
    woken = sum(w.woken for w in waiters)
    print(f"# [{MODE}] waiters woken by one job: {woken}")
    check("... and one job woke one of them", woken, 1)

def handed_on(queue, look):
    """Two claims wait in queue, and an enqueue's wake-up goes to the first,
    whose backend is stopped (SIGSTOP) when it comes.  Without look, the
    first is cancelled before it can take the wake-up; with look, it takes
    it and looks, held up by a lock on the jobs table, and is cancelled
    there.  Either way the wake-up must go on to the second.  Returns the
    job, the two calls, and when the second could first have claimed."""
    first = claim_wait(queue, sid, "30 s")
    until_waiting([first])
    time.sleep(0.2)
    second = claim_wait(queue, sid, "30 s")
    until_waiting([second])
    with connect() as locker:
        os.kill(first.pid, signal.SIGSTOP)
        try:
            job = enqueue(queue)
            if look:
                locker.execute("BEGIN")
                locker.execute("LOCK TABLE distlock.jobs")
            else:
                admin.execute("SELECT pg_cancel_backend(%s)", (first.pid,))
        finally:
            os.kill(first.pid, signal.SIGCONT)
        if look:
            end = time.monotonic() + 10
            while time.monotonic() < end and not one(
                    "SELECT wait_event_type = 'Lock' FROM pg_stat_activity"
                    " WHERE pid = %s", first.pid):
                time.sleep(0.02)
            admin.execute("SELECT pg_cancel_backend(%s)", (first.pid,))
        first.join()
        if look:
            locker.execute("COMMIT")
        free = time.monotonic()
        second.join()
    return job, first, second, free


# A waiter that leaves with a wake-up, cancelled before it took it or in
# the look it took it for, hands it on: the next waiter would otherwise
# sleep until its wait ends (or, without the background worker, until it
# looks again 5 s after its last look).
if WOKEN:
    for look, when in ((False, "before it looked"), (True, "in its look")):
        job, first, second, free = handed_on(f"handed-on-{look}", look)
        check(f"a woken waiter cancelled {when} hands its wake-up on",
              (first.error, ids(second.result), second.ended - free < 2.5),
              ("57014", [job], True))

# A job due later wakes one waiter, which looks, learns when it is due and
# sleeps until then: it alone knows.  Cancelled before that, it hands on
# what it knew; the next waiter looks, and takes the job once it is due,
# not when its own sleep ends (its wait, or its session's heartbeat at half
# the ttl: 30 s here; 5 s after its last look when nobody reaps in the
# background).
if WOKEN:
    first = claim_wait("due-cancelled", sid, "30 s")
    until_waiting([first])
    time.sleep(0.2)
    second = claim_wait("due-cancelled", sid, "30 s")
    until_waiting([second])
    job = enqueue("due-cancelled", "1.5 s")
    due = time.monotonic() + 1.5
    time.sleep(0.3)
    until_waiting([first])
    admin.execute("SELECT pg_cancel_backend(%s)", (first.pid,))
    first.join()
    second.join()
    check("a waiter that alone knew when a job is due, cancelled, hands that"
          " on: the next takes the job when it is due (within 1.5 s of it)",
          (first.error, ids(second.result), second.ended - due < 1.5),
          ("57014", [job], True))

# Two things to hand on, one waiter each: the first waiter, which alone
# knows when a job is due, is woken for another job and fails in its look
# (its session was closed meanwhile).  The next two take the job it was
# woken for and, once it is due, the one it knew of.
if WOKEN:
    gone = session()
    calls = [claim_wait("due-two-reasons", s, "30 s") for s in (gone, sid, sid)]
    for c in calls:
        until_waiting([c])
        time.sleep(0.2)
    later = enqueue("due-two-reasons", "2 s")
    due = time.monotonic() + 2
    time.sleep(0.3)
    until_waiting([calls[0]])
    one("SELECT distlock.session_close(%s)", gone)
    now_job = enqueue("due-two-reasons")
    for c in calls:
        c.join()
    check("a waiter woken for one job that also knew when another is due"
          " hands on both: the next two take them (the later within 1.5 s"
          " of its due time)",
          (calls[0].error, sorted(ids(calls[1].result) + ids(calls[2].result)),
           max(calls[1].ended, calls[2].ended) - due < 1.5),
          ("42704", sorted([later, now_job]), True))

# What a waiter knew of a job due later is not handed on when another
# waiter knows of it too: the first waiter (which the later job's enqueue
# woke) takes a job due now and leaves; the waiter that came after the
# later job knows of it, so the one in between, which does not, is not
# woken, and the one that knows takes the later job when it is due.
if WOKEN:
    first = claim_wait("due-known", sid, "30 s")
    until_waiting([first])
    time.sleep(0.2)
    between = claim_wait("due-known", sid, "6 s", debug=True)
    until_waiting([between])
    later = enqueue("due-known", "3 s")
    time.sleep(0.3)
    until_waiting([first])
    knowing = claim_wait("due-known", sid, "30 s")
    until_waiting([knowing])
    now_job = enqueue("due-known")
    for c in (first, between, knowing):
        c.join()
    check("a waiter that leaves wakes nobody for a job due later that another"
          " waiter knows of",
          (ids(first.result), ids(between.result), between.woken,
           ids(knowing.result)),
          ([now_job], [], 0, [later]))

# A session reaped: its job goes back to the queue and wakes a waiter.
short = session("1 s")
job = enqueue("reaped")
one("SELECT count(*) FROM distlock.claim('reaped', %s)", short)
c = claim_wait("reaped", sid, "30 s")
if not PRELOAD:
    # nobody reaps in the background: a caller does
    time.sleep(1.5)
    one("SELECT distlock.reap()")
c.join()
check("a job handed back from an expired session reaches a waiting claim",
      ids(c.result), [job])
check("... long before the wait ends", c.elapsed() < 10, True)

# The same when nobody reaps: preloaded, the background worker does; else
# the waiter's own looks, at least every 5 s (with shared memory it is
# otherwise asleep until a commit wakes it or its wait ends).
short = session("1 s")
job = enqueue("lapsed")
one("SELECT count(*) FROM distlock.claim('lapsed', %s)", short)
c = claim_wait("lapsed", sid, "20 s")
c.join()
check("a job of a session that expires while a claim waits, reaped by"
      " nobody else, reaches the waiting claim",
      (ids(c.result), c.elapsed() < 9), ([job], True))

# A waiting claim keeps its session alive, past the session's ttl.  It
# beats once half the ttl is left, so a stall of more than that (1 s with a
# ttl of 2 s, seen once on a loaded machine) would let the session lapse:
# a ttl of 3 s, and a wait of more than twice that.
brief = session("3 s")
c = claim_wait("kept-alive", brief, "7 s")
c.join()
check("a waiting claim keeps its session alive past the session's ttl",
      (c.result, kept_alive(brief, c)), ([], True))

def rolled_back(queue, undo):
    """A job claimed in a savepoint of an open transaction, a claim_wait()
    waiting, then undo: ROLLBACK (the savepoint released into its parent
    first) or ROLLBACK TO the savepoint, the transaction going on.  Returns
    the job, the waiting call, and the seconds from undo to its end."""
    job = enqueue(queue)
    with connect() as conn:
        conn.execute("BEGIN")
        conn.execute("SAVEPOINT a")
        conn.execute("SELECT count(*) FROM distlock.claim(%s, %s)",
                     (queue, sid))
        if undo == "ROLLBACK":
            conn.execute("RELEASE a")
        c = claim_wait(queue, sid, "30 s")
        _, took = woken_by(c, lambda: conn.execute(undo))
        if undo != "ROLLBACK":
            conn.execute("COMMIT")
    return job, c, took


# A claim that rolls back gives its job back to a waiter, woken by the
# rollback (a waiter that missed it would look again 5 s after its last
# look), whether the whole transaction rolls back or only a savepoint.
job, c, took = rolled_back("rolled-back", "ROLLBACK")
check("a claim rolled back gives its job to a waiting claim", ids(c.result),
      [job])
check("... woken by the rollback (within 2.5 s of it)", took < 2.5, True)
job, c, took = rolled_back("sub-rolled-back", "ROLLBACK TO a")
check("a claim rolled back to a savepoint gives its job to a waiting claim",
      ids(c.result), [job])
check("... woken by the rollback to the savepoint (within 2.5 s of it)",
      took < 2.5, True)

# Two jobs due at one time, each enqueued in a commit of its own while two
# claims wait: each commit wakes the first waiter (asleep again by the
# second), which learns when they are due; then it takes one, a full batch,
# and wakes the next, which knew of neither.
a = claim_wait("due-two", sid, "20 s")
until_waiting([a])
time.sleep(0.2)
b = claim_wait("due-two", sid, "20 s")
until_waiting([b])
due = one("SELECT now() + '1.5 s'::interval")
jobs = []
for _ in range(2):
    jobs.append(one("SELECT distlock.enqueue('due-two', '{}', %s)", due))
    time.sleep(0.2)
    until_waiting([a])
a.join()
b.join()
check("two jobs due at one time reach two waiting claims, the second woken"
      " by the first (within 2.5 s of it)",
      (sorted(ids(a.result) + ids(b.result)), b.ended - a.ended < 2.5),
      (sorted(jobs), True))

# At REPEATABLE READ: each look is a transaction of its own.
c = Call("CALL distlock.claim_wait(%s, %s, 1, '30 s')", ("rr", sid))
c.conn.execute("SET default_transaction_isolation = 'repeatable read'")
c.start()
until_waiting([c])
time.sleep(0.3)
job = enqueue("rr")
c.join()
check("a waiting claim at REPEATABLE READ gets the job enqueued while it "
      "waits", ids(c.result), [job])

# Jobs of another role's queue of the same name: another queue, with a line
# of its own.  Nobody claims them, nobody spins, and the enqueue wakes none
# of these waiters (the owner is part of the key of a queue's line).
admin.execute("DROP ROLE IF EXISTS wait_x; DROP ROLE IF EXISTS wait_r;"
              " CREATE ROLE wait_x LOGIN; CREATE ROLE wait_r LOGIN;"
              " GRANT USAGE ON SCHEMA distlock TO wait_x, wait_r")
with connect(user="wait_x") as x:
    xsid = x.execute("SELECT distlock.session_open('60 s')").fetchone()[0]
xs = [Call("CALL distlock.claim_wait('shared', %s, 1, '3 s')", (xsid,),
           debug=True) for _ in range(2)]
for w in xs:
    w.conn.execute("SET ROLE wait_x")
    w.start()
until_waiting(xs)
time.sleep(0.2)
with connect(user="wait_r") as r:
    r.execute("SELECT distlock.enqueue('shared')")
for w in xs:
    w.join()
check("waiters that may not take another role's job leave it",
      [w.result for w in xs], [[], []])
if WOKEN:
    check("... and wakes none of them", [w.woken for w in xs], [0, 0])

#
# acquire(): the waiting try_acquire().
#
holder = one("SELECT distlock.try_acquire('fifo', 'holder', '60 s')")
order = []


class Acquirer(Call):
    def __init__(self, i):
        super().__init__("CALL distlock.acquire('fifo', %s, '60 s',"
                         " wait => '30 s')", (f"w{i}",))
        self.i = i
        self.token = None

    def run(self):
        self.token = self.conn.execute(self.sql, self.args).fetchone()[0]
        order.append(self.i)
        time.sleep(0.05)
        self.conn.execute("SELECT distlock.release('fifo', %s)",
                          (f"w{self.i}",))


acquirers = []
for i in range(5):
    a = Acquirer(i)
    a.start()
    acquirers.append(a)
    until_waiting([a])         # each joins the line after the one before
time.sleep(0.3)
one("SELECT distlock.release('fifo', 'holder')")
for a in acquirers:
    a.join(30)
check("waiting acquirers get a released lock in the order they came",
      order, [0, 1, 2, 3, 4])
tokens = [a.token for a in acquirers]
check("... each with a larger token", None not in tokens and
      tokens == sorted(tokens) and len(set(tokens)) == 5 and
      tokens[0] > holder, True)

one("SELECT distlock.try_acquire('expiring', 'holder', '1 s')")
c = Call("CALL distlock.acquire('expiring', 'waiter', wait => '30 s')")
c.start()
c.join()
check("a waiting acquire gets a lease when it expires",
      c.result is not None, True)
check("... not before", 0.5 <= c.elapsed() < 10, True)

one("SELECT distlock.try_acquire('kept', 'holder', '60 s')")
c = Call("CALL distlock.acquire('kept', 'waiter', wait => '1 s')")
c.start()
c.join()
check("a waiting acquire whose wait ends returns NULL", c.result, None)
check("... once the wait is over", c.elapsed() >= 0.95, True)

# A lease that ran out while its holder's transaction still fences it
# (fence() holds it until that transaction ends): a waiting acquire waits
# for that transaction no longer than its wait, and keeps its session
# alive meanwhile (its tries wait only until the next heartbeat is due).
fenced = one("SELECT distlock.try_acquire('fenced', 'holder', '1 s')")
fsid = session("2 s")
with connect() as fencer:
    fencer.execute("BEGIN")
    fencer.execute("SELECT distlock.fence('fenced', %s)", (fenced,))
    time.sleep(1.1)
    c = Call("CALL distlock.acquire('fenced', 'waiter', '60 s', %s,"
             " wait => '3 s')", (fsid,))
    c.start()
    c.join(timeout=15)
    check("a waiting acquire held up by a fencing transaction ends with its"
          " wait", (c.ended is not None, c.result, c.error), (True, None, None))
    check("... on time, its session kept alive",
          (c.ended is not None and c.elapsed() < 5,
           one("SELECT distlock.heartbeat(%s)", fsid)), (True, True))
    fencer.execute("ROLLBACK")
c = Call("CALL distlock.acquire('fenced', 'waiter', '60 s', wait => '3 s')")
c.start()
c.join(timeout=15)
check("... and takes the lease once the fencing transaction has ended",
      (c.error, c.result is not None and c.result > fenced), (None, True))

bound = session()
one("SELECT distlock.try_acquire('bound', 'holder', '60 s', %s)", bound)
c = Call("CALL distlock.acquire('bound', 'waiter', wait => '30 s')")
c.start()
until_waiting([c])
time.sleep(0.3)
one("SELECT distlock.session_close(%s)", bound)
c.join()
check("a lease freed by its session's close reaches a waiting acquire",
      c.result is not None and c.elapsed() < 10, True)

with connect() as conn:
    conn.execute("BEGIN")
    try:
        conn.execute("CALL distlock.acquire('kept', 'w', wait => '1 s')")
        state = None
    except psycopg.Error as e:
        state = e.sqlstate
    check("acquire inside a transaction block raises 25001", state, "25001")
    conn.execute("ROLLBACK")
    got = conn.execute("CALL distlock.acquire('free-now', 'w', wait => '0')"
                       ).fetchone()[0]
    check("... and wait => '0' is try_acquire()", got is not None, True)

# A session-bound acquirer keeps its session alive while it waits in line.
one("SELECT distlock.try_acquire('queued', 'holder', '60 s')")
first = Call("CALL distlock.acquire('queued', 'a', wait => '30 s')")
first.start()
until_waiting([first])
brief = session("3 s")     # as for the waiting claim above
second = Call("CALL distlock.acquire('queued', 'b', '60 s', %s,"
              " wait => '7 s')", (brief,))
second.start()
second.join()
check("an acquirer waiting in line keeps its session alive",
      (second.result, kept_alive(brief, second)),
      (None, True))
admin.execute("SELECT pg_cancel_backend(%s)", (first.pid,))
first.join()

# An acquirer in line whose session has already expired (a worker back
# from a long pause with its old session) sleeps.  It used to try to beat
# the session again and again: the beat was due in the past, so it woke
# every millisecond until its wait ended.  Checked where nothing reaps in
# the background: preloaded, the background worker deletes the row within
# a second, which ends the beats too.
if not PRELOAD:
    one("SELECT distlock.try_acquire('lapsed', 'holder', '60 s')")
    first = Call("CALL distlock.acquire('lapsed', 'a', wait => '30 s')")
    first.start()
    until_waiting([first])
    lapsed = session("1 s")
    time.sleep(1.2)
    late = Call("CALL distlock.acquire('lapsed', 'b', '60 s', %s,"
                " wait => '5 s')", (lapsed,))
    late.start()
    # not until_waiting(): a waiter that spins is never seen asleep
    time.sleep(0.5)
    used = cpu_over_2s(late, "an acquirer in line with an expired session")
    check("an acquirer in line with an expired session sleeps",
          (late.is_alive(), used <= (0.05 if WOKEN else 0.5)), (True, True))
    late.join()
    check("... until its wait ends, with NULL", (late.result, late.error),
          (None, None))
    admin.execute("SELECT pg_cancel_backend(%s)", (first.pid,))
    first.join()

# The holder's own acquire re-enters at once, ahead of the line.
holder = one("SELECT distlock.try_acquire('reenter', 'holder', '60 s')")
c = Call("CALL distlock.acquire('reenter', 'other', wait => '30 s')")
c.start()
until_waiting([c])
t0 = time.monotonic()
again = one("CALL distlock.acquire('reenter', 'holder', '60 s', wait => '30 s')")
check("the holder's acquire re-enters at once, keeping its token, while "
      "another waits", (again, time.monotonic() - t0 < 5), (holder, True))
admin.execute("SELECT pg_cancel_backend(%s)", (c.pid,))
c.join()

# A cancelled acquirer leaves the line: the next one is served.
one("SELECT distlock.try_acquire('line', 'holder', '60 s')")
first, second = in_line(
    Call("CALL distlock.acquire('line', 'a', wait => '30 s')"),
    Call("CALL distlock.acquire('line', 'b', wait => '30 s')"))
admin.execute("SELECT pg_cancel_backend(%s)", (first.pid,))
first.join()
one("SELECT distlock.release('line', 'holder')")
second.join()
check("a cancelled acquirer leaves the line to the next",
      (first.error, second.result is not None), ("57014", True))

# A lease that drop_owned() deletes wakes the acquirer waiting for it
# (which would otherwise sleep until its wait ends, the lease having 60 s
# to run).
with connect(user="wait_x") as x:
    x.execute("SELECT distlock.try_acquire('dropped', 'x', '60 s')")
c = Call("CALL distlock.acquire('dropped', 'waiter', wait => '8 s')")
c.start()
_, took = woken_by(c, lambda: one(
    "SELECT locks FROM distlock.drop_owned('wait_x')"))
check("a lease dropped by drop_owned() reaches a waiting acquire",
      c.result is not None, True)
check("... woken by the drop (within 2.5 s of it)", took < 2.5, True)

# Jobs that reassign_owned() moves into a queue wake its waiters.
with connect(user="wait_r") as r:
    job = r.execute("SELECT distlock.enqueue('moved')").fetchone()[0]
with connect(user="wait_x") as x:
    xsid = x.execute("SELECT distlock.session_open('60 s')").fetchone()[0]
c = Call("CALL distlock.claim_wait('moved', %s, 1, '8 s')", (xsid,))
c.conn.execute("SET ROLE wait_x")
c.start()
_, took = woken_by(c, lambda: one(
    "SELECT jobs FROM distlock.reassign_owned('wait_r', 'wait_x')"))
check("a job reassign_owned() moves into a queue reaches its waiting claim",
      ids(c.result), [job])
check("... woken by the move (within 2.5 s of it)", took < 2.5, True)

# An acquirer that gets the lease leaves the line and wakes the next, first
# now, which learns when that lease ends: given for 1 s, the next takes it
# then, not when its own wait ends.
one("SELECT distlock.try_acquire('succession', 'holder', '60 s')")
first, second = in_line(
    Call("CALL distlock.acquire('succession', 'a', '1 s', wait => '30 s')"),
    Call("CALL distlock.acquire('succession', 'b', wait => '10 s')"))
one("SELECT distlock.release('succession', 'holder')")
first.join()
second.join()
check("the next in line takes a lease when the one served before it ends"
      " (within 2.5 s)",
      (first.result is not None, second.result is not None,
       second.ended - first.ended < 2.5), (True, True, True))

# Only the first in line tries: a lease freed without a wake-up (its row
# deleted by hand, as an expiry frees it unannounced) goes to the first in
# line when it next looks, not to a later one that wakes sooner (here to
# beat its session).
one("SELECT distlock.try_acquire('unannounced', 'holder', '60 s')")
beating = session("2 s")
first, second = in_line(
    Call("CALL distlock.acquire('unannounced', 'a', wait => '4 s')"),
    Call("CALL distlock.acquire('unannounced', 'b', '60 s', %s,"
         " wait => '6 s')", (beating,)))
admin.execute("DELETE FROM distlock.locks WHERE name = 'unannounced'")
first.join()
second.join()
check("a lease freed unannounced goes to the first in line, not to a later"
      " one awake first", (first.result is not None, second.result),
      (True, None))

# A lease whose holder's session has expired while a heartbeat of it is in
# flight (a transaction left open after heartbeat()) looks free as
# committed, yet is refused: that heartbeat may still extend the session.
# The first in line looks again every distlock.wait_poll_interval, not at
# once (mutation m35 of the second sweep spun), and takes the lease once
# that transaction ends, which wakes nobody.  Looking every 200 ms, its
# looks cost a few milliseconds of CPU over 2 s; looking again at once,
# some 0.2 s (a wait sleeps at least 1 ms).
beat = psycopg.connect()
holder = session("2 s")
one("SELECT distlock.try_acquire('beating', 'holder', '60 s', %s)", holder)
check("a heartbeat left in flight answers true",
      beat.execute("SELECT distlock.heartbeat(%s)", (holder,)).fetchone()[0],
      True)
c = Call("CALL distlock.acquire('beating', 'waiter', wait => '10 s')")
c.conn.execute("SET distlock.wait_poll_interval = 200")
c.start()
# past the session's committed expiry (the heartbeat's promise counts only
# once it commits)
time.sleep(2.5)
used = cpu_over_2s(c, "an acquirer refused a lease free as committed")
check("an acquirer refused a lease free as committed (a heartbeat in"
      " flight) looks again only every poll interval",
      (c.is_alive(), used <= 0.1), (True, True))
_, took = woken_by(c, beat.rollback)
beat.close()
check("... and takes it once the heartbeat's transaction ends (within"
      " 2.5 s)", (c.result is not None, took < 2.5), (True, True))

sys.exit(0 if all(results) else 1)
