#!/usr/bin/python3
"""test/fault/checker.py -- judge a recorded fault-injection history.

    checker.py DIR                 check a run of workload.py, print its
                                   figures and one "ok"/"not ok" line per
                                   invariant and for the fault floors
    checker.py --selftest DIR      run the checker on the hand-written
                                   histories in DIR (*.json): each planted
                                   violation must be flagged, and only it;
                                   the clean history must pass
    checker.py --advisory FILE     report workload.py's advisory-lock
                                   measurement through PgBouncer

A history is what the clients saw (ops: one record per operation, with the
transaction id, the server clock before (t0) and after (t1) the call, and
the outcome ok / fail (definite) / info (unknown)), what the server recorded
(wal: every change of distlock's rows and every commit record, as the
test_decoding plugin printed them from the WAL; writes: the fenced
resource's accepted writes; effects: the queue workers' effects; jobs,
locks, sessions: the final state of distlock's tables), the status of every
transaction id after the run (xact), and pg_stat_statements' counts of the
statements distlock ran inside its functions (pgss).

The WAL text is turned into one change record per row change (decode_wal):
table, operation, transaction id, commit time, and the row before and
after with the columns the invariants read, times in microseconds.  The
harness puts nothing on distlock's tables (a trigger of its own would
divert the queue to its SQL path), so two things that its audit triggers used to
record are derived here instead:

  - the row before an UPDATE or DELETE.  test_decoding prints the old row
    only under REPLICA IDENTITY FULL (a change to distlock's tables we do
    not make); the WAL is in commit order, and a row's versions are
    committed in the order they were made (each updater waits for the
    previous one to end), so the old row is the row's previous version in
    the stream.  The slot is created before the first row is written, so
    every row's first version is there; a change to a row the stream never
    showed is counted (and reported as a gap in the history).
  - the server clock at the change.  What the invariants compare are the
    times the rows carry (acquired_at, renewed_at, expires_at, heartbeat_at,
    claimed_at, finished_at: each the clock of the call that wrote it).  The
    change's own time served only to attribute it to an operation (the
    latest with its transaction id that began before it, across restarts):
    the commit time does that as well, since a change is made between its
    operation's start and its commit (and "at" is the commit time here).
    A session's deletion ends the session at the earlier of its commit and
    the end (t1) of the call that deleted it; the deletion was made before
    either.

With distlock.delete_completed an acknowledgement deletes its job: a
deletion of a running job is decoded with, as its row after, the job
completed (finished_at unknown: the call's end, t1, bounds it), and read
as the acknowledgement it is.

Invariants (shared/research/reliability.md, section 6):

  L1  no two leases of a name overlap in server time: on the server's rows
      (a grant never replaces a lease that had not ended), and in what the
      clients were told (a lease granted with ttl lasts at least from the
      grant until t0 + ttl, or until its holder's next call on it)
  L2  tokens strictly increase per name in commit order; no token is
      granted twice for a name, nor handed to two owners; no client is
      given a token smaller than one granted before its call began
  L3  every renew and release that changed a lock was its holder's
  L4  the fenced resource accepted only current tokens: per name, in
      commit order, accepted tokens never decrease; each accepted write
      committed before the next grant and while its lease had not expired;
      fence() never let through a token the resource then refused
  L5  every write acknowledged to a client is in the resource
  L6  every change on the server belongs to an operation that committed
      (ok, or info resolved committed); none to a definite failure; every
      acknowledged operation that changed something committed (durably,
      across crashes) and left the changes it reported, and a "no" answer
      left none; every unknown outcome resolved as committed left its
      changes.  A heartbeat that answered true wrote its session's row at
      most once, with heartbeat_at within its call and expires_at from
      ttl to 4 ttl past it (written ahead, with shared memory), or, with
      shared memory, nothing, and then a version of the row committed
      before the call's end already covered its promise (so that a crash
      cannot lose it).  (A refusal, or a heartbeat that wrote nothing,
      writes no WAL, so PostgreSQL does not wait for its commit record to
      reach disk: a crash may lose it and hand its transaction id out
      again.  That loses nothing and is only counted.)
  Q1  every job completed exactly once, with exactly one effect, committed
      in the acknowledging transaction

An acknowledgement is complete(job, sid) ("ack": true or false) or one
complete_batch(jobs, sid) ("ack_batch": the ids it returned, each once and
in ascending order): each id returned is that job acknowledged by that
session in that transaction, under the same rules as a true "ack"; each id
asked and not returned is a refusal, as a false one.  One
complete_batch_and_claim(jobs, sid) ("ack_batch_claim") that answered
acknowledged every job asked, each once, in its transaction, and claimed
the jobs it returned for that session, as a claim that returned them; one
that raised (55000, 42704) acknowledged and claimed nothing, and must not
have committed.
  Q2  every accepted acknowledgement came from the job's claiming session
      while that session may have been live: within what the server had
      promised it (session_open() until expires_at, each true heartbeat
      until its clock + ttl: heartbeat_at + ttl for one that wrote the
      row, up to t1 + ttl for one that did not), or, after a crash, until
      the row's expires_at as committed at the crash
  Q3  no job lost: every enqueued job is completed at the end
  Q4  acknowledgements from expired sessions were refused (counted; the
      fault floors require some)
  Q5  no job handed to two live sessions: no claim took a job running for
      another session while that session was surely live
  S1  no session died before its promise: no reap (reap(), a claim's reap
      in passing: any deletion of its row but its own session_close())
      came before the latest promise the session had been given when the
      reaping call began (created_at + ttl, heartbeat_at + ttl of a row
      update committed by then, t0 + ttl of a true heartbeat that committed
      and had ended by then, whether it wrote the row or not)
"""

import bisect
import calendar
import collections
import glob
import json
import os
import re
import sys

INVARIANTS = ["L1", "L2", "L3", "L4", "L5", "L6", "Q1", "Q2", "Q3", "Q5", "S1"]
EXAMPLES = 3            # counterexamples printed per invariant


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------

def read_jsonl(path):
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass        # a line cut short by SIGKILL
    return out


def load(path):
    """A history from a run directory or a single hand-written JSON file."""
    if os.path.isdir(path):
        raw = []
        for fn in sorted(glob.glob(os.path.join(path, "ops-*.jsonl"))):
            raw.extend(read_jsonl(fn))
        h = dict(ops=raw)
        for key in ("writes", "effects", "jobs", "locks", "sessions", "xact", "faults",
                    "pgss"):
            h[key] = read_jsonl(os.path.join(path, key + ".jsonl"))
        with open(os.path.join(path, "meta.json")) as f:
            h["meta"] = json.load(f)
        # decoded as it is read: the text is the bulk of the history
        with open(os.path.join(path, "wal.jsonl")) as f:
            h["changes"], h["decoding"] = decode_wal(json.loads(ln) for ln in f)
    else:
        h = load_file(path)
        h["changes"], h["decoding"] = decode_wal(h["wal"])
    h["ops"] = merge_ops(h["ops"])
    return h


# ---------------------------------------------------------------------------
# The WAL, as test_decoding prints it
# ---------------------------------------------------------------------------

# Per table: the key column, and the columns the checker reads under the
# names it reads them by.
TABLES = {
    "locks": ("name", {"name": "name", "owner": "owner", "session_id": "session",
                       "token": "token", "acquired_at": "acquired",
                       "renewed_at": "renewed", "expires_at": "expires",
                       "hold_until": "hold"}),
    "sessions": ("id", {"id": "id", "owner": "owner", "created_at": "created",
                        "heartbeat_at": "heartbeat", "expires_at": "expires"}),
    "jobs": ("id", {"id": "id", "status": "status", "session_id": "session",
                    "attempts": "attempts", "claimed_at": "claimed",
                    "finished_at": "finished"}),
}
# "table distlock.jobs: UPDATE: id[bigint]:1 queue[text]:'q' ..."
WAL_CHANGE = re.compile(r"table distlock\.(\w+): (INSERT|UPDATE|DELETE):(.*)\Z", re.S)
# one column: name[type]:value, where value is 'quoted' ('' for a quote),
# null, or a bare number; "old-key:" and "new-tuple:" mark the parts of an
# UPDATE that changed the key
WAL_COLUMN = re.compile(r"\s*(?:(old-key|new-tuple):\s*)?([^\[\s]+)\[(.*?)\]:"
                        r"('(?:[^']|'')*'|\S+)", re.S)
# "COMMIT 1234 (at 2026-11-23 13:40:13.596894+00)"
WAL_COMMIT = re.compile(r"COMMIT (\d+) \(at (.+)\)\Z")
# timestamptz in ISO style: workload.py reads the slot with TimeZone UTC
TIMESTAMPTZ = re.compile(r"(\d{4,})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?"
                         r"(?:([+-])(\d\d)(?::?(\d\d))?(?::?(\d\d))?)?\Z")
UNCHANGED = object()        # a TOASTed value the update did not change


def us(text):
    """A timestamptz printed in ISO style, as microseconds since the epoch
    (what fault.us() computes on the server)."""
    if text in ("infinity", "-infinity"):
        return (1 if text == "infinity" else -1) * 2 ** 62
    m = TIMESTAMPTZ.match(text)
    if m is None:
        raise ValueError("cannot read timestamp %r" % text)
    g = m.groups()
    secs = calendar.timegm(tuple(int(x) for x in g[:6]) + (0, 0, 0))
    if g[7]:
        off = int(g[8]) * 3600 + int(g[9] or 0) * 60 + int(g[10] or 0)
        secs -= off if g[7] == "+" else -off
    return secs * 1000000 + int((g[6] or "0").ljust(6, "0"))


def wal_value(typ, raw):
    if raw == "null":
        return None
    if raw == "unchanged-toast-datum":
        return UNCHANGED
    v = raw[1:-1].replace("''", "'") if raw.startswith("'") else raw
    if typ in ("bigint", "integer", "smallint"):
        return int(v)
    if typ == "timestamp with time zone":
        return us(v)
    return v


def wal_columns(text):
    """The columns of one change: (old key, new tuple) as dicts."""
    old_key, new = {}, {}
    into = new
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = WAL_COLUMN.match(text, pos)
        if m is None:
            raise ValueError("cannot read the columns of %r at %d" % (text[:200], pos))
        if m.group(1) == "old-key":
            into = old_key
        elif m.group(1) == "new-tuple":
            into = new
        into[m.group(2)] = wal_value(m.group(3), m.group(4))
        pos = m.end()
    return old_key, new


def decode_wal(lines):
    """Change records (id, tbl, op, xid, at, commit, old, new) from the
    slot's lines ({"lsn", "xid", "data"}, in WAL order): see the module's
    comment for how old and at are derived.  Returns them, and the counts
    of what could not be derived (changes to rows the stream had not shown
    before, changes without a commit) with each row's last version
    ("last"), which the final state of the tables must match."""
    out = []
    stats = collections.Counter()
    last = {}                   # (table, key) -> the row's latest columns
    pending = []                # changes of the transaction being read
    for ln in lines:
        data = ln["data"]
        m = WAL_COMMIT.match(data)
        if m is not None:
            commit = us(m.group(2))
            for rec in pending:
                if rec["xid"] != int(m.group(1)):
                    stats["xid_mismatch"] += 1
                rec["commit"] = rec["at"] = commit
            if pending:
                stats["commits"] += 1
            out.extend(pending)
            pending = []
            continue
        m = WAL_CHANGE.match(data)
        if m is None:
            continue            # BEGIN, or a change of another table
        tbl, kind, rest = m.groups()
        if tbl not in TABLES:
            continue
        keycol, cols = TABLES[tbl]
        old_key, row = wal_columns(rest)
        key = (old_key or row).get(keycol)
        prev = last.get((tbl, key))
        if kind != "INSERT" and prev is None:
            stats["unseen"] += 1
            prev = {}
        if kind == "DELETE":
            last.pop((tbl, key), None)
        else:
            # only the columns read here are kept
            row = {c: prev.get(c) if row.get(c) is UNCHANGED else row.get(c) for c in cols}
            if old_key:
                last.pop((tbl, key), None)
            last[(tbl, row[keycol])] = row

        def pick(r):
            return None if r is None else {cols[c]: r.get(c) for c in cols}
        new = pick(row) if kind != "DELETE" else None
        if kind == "DELETE" and tbl == "jobs" and prev.get("status") == "running":
            # an acknowledgement that deleted its job (delete_completed)
            new = dict(pick(prev), status="completed")
        pending.append(dict(id=len(out) + len(pending) + 1, tbl=tbl, op=kind[0],
                            xid=ln["xid"], lsn=ln.get("lsn"),
                            old=pick(prev) if kind != "INSERT" else None,
                            new=new))
        stats["changes"] += 1
    stats["uncommitted"] = len(pending)
    return out, dict(stats, last=last)


def load_file(path):
    """A hand-written history.  One that names a "base" is that history with
    records dropped ("drop": kind and fields to match), changed ("patch":
    kind, fields to match, and fields to set, "new.expires" reaching into a
    nested row) and added ("add": records per kind): a violation planted in
    a clean history."""
    with open(path) as f:
        h = json.load(f)
    if "base" in h:
        b = load_file(os.path.join(os.path.dirname(path), h["base"]))
        b["meta"] = h.get("meta", {})

        def matches(rec, m):
            return all(rec.get(k) == v for k, v in m.items())
        for d in h.get("drop", []):
            b[d["kind"]] = [r for r in b[d["kind"]] if not matches(r, d["match"])]
        for p in h.get("patch", []):
            hit = [r for r in b[p["kind"]] if matches(r, p["match"])]
            if len(hit) != 1:
                raise ValueError("%s: patch %r matches %d records" % (path, p, len(hit)))
            for k, v in p["set"].items():
                target = hit[0]
                *path_, last = k.split(".")
                for part in path_:
                    target = target[part]
                target[last] = v
        for kind, recs in h.get("add", {}).items():
            b.setdefault(kind, []).extend(recs)
        h = b
    for key in ("ops", "wal", "writes", "effects", "jobs", "locks", "sessions", "xact",
                "faults", "pgss"):
        h.setdefault(key, [])
    # hand-written WAL lines are in LSN order, planted ones included
    h["wal"].sort(key=lambda ln: tuple(int(x, 16) for x in ln["lsn"].split("/")))
    h.setdefault("meta", {})
    return h


def merge_ops(raw):
    """One record per operation.  An operation with a "pre" line (written
    before COMMIT) and no "op" line was cut short: its outcome is unknown."""
    ops = {}
    for r in raw:
        key = (r.get("c"), r.get("i"), r.get("s"))
        if r.get("k") == "pre":
            if key not in ops:
                rec = dict(r, k="op", outcome="info", err="killed")
                ops[key] = rec
        else:
            ops[key] = r
    out = list(ops.values())
    out.sort(key=lambda r: (str(r.get("c")), r.get("i") or 0, r.get("s") or 0))
    return out


def acked_jobs(op):
    """The jobs an acknowledgement op that answered says it acknowledged:
    complete()'s job if it said true, the ids complete_batch() returned,
    every id complete_batch_and_claim() was asked if it answered at all
    (it raises rather than leave one out)."""
    if op["op"] == "ack":
        return [op["job"]] if op.get("r") else []
    if op["op"] == "ack_batch":
        return list(op.get("r") or [])
    if op["op"] == "ack_batch_claim":
        return sorted(set(op.get("jobs") or [])) if op.get("r") is not None else []
    return []


def deleted(cs):
    """Whether a job's last acknowledgement of cs deleted it."""
    return bool(cs) and cs[-1]["op"] == "D"


def claimed_rows(jobs):
    """The changes of jobs rows that claimed a job: left it running for a
    session it was not running for."""
    return [a for a in jobs if a["op"] == "U" and a["new"]["status"] == "running"
            and (a["old"]["status"] != "running"
                 or a["old"].get("session") != a["new"].get("session"))]


def changed(op):
    """Whether an operation's answer says it changed something."""
    kind, r = op["op"], op.get("r")
    if kind == "acquire":
        return r is not None
    if kind == "write":
        return bool(op.get("accepted"))
    if kind in ("open",):
        return True
    return bool(r)


# ---------------------------------------------------------------------------
# The checker
# ---------------------------------------------------------------------------

class Check:
    def __init__(self, h):
        self.h = h
        self.v = collections.defaultdict(list)     # invariant -> [messages]
        self.fig = collections.OrderedDict()
        self.ops = h["ops"]
        self.changes = sorted(h["changes"], key=lambda a: (a.get("commit") or 0, a["id"]))
        self.xact = {x["xid"]: x for x in h["xact"]}
        self.restart_bounds = [(r.get("before_us"), r.get("after_us"))
                               for r in h["meta"].get("restarts", [])]

    def flag(self, inv, msg):
        self.v[inv].append(msg)

    # -- transaction ids: which operation owns a row, and did it commit -----

    def index(self):
        self.by_xid = collections.defaultdict(list)
        for op in self.ops:
            if op.get("xid") is not None:
                self.by_xid[op["xid"]].append(op)
        for lst in self.by_xid.values():
            lst.sort(key=lambda o: o.get("t0") or 0)
        # A transaction id can be handed out again after a crash when the
        # transaction that had it wrote no WAL: a row or a commit belongs to
        # the latest operation with that id that began before it.
        self.committed = {}
        for xid, lst in self.by_xid.items():
            x = self.xact.get(xid)
            owner = None
            if x is not None and x.get("status") == "committed":
                owner = self.owner_at(xid, x.get("commit"))
            for op in lst:
                if x is None:
                    c = {"ok": True, "fail": False}.get(op["outcome"])
                else:
                    c = op is owner
                self.committed[id(op)] = c
        self.rows = collections.defaultdict(list)     # id(op) -> rows
        self.unattributed = []
        for kind in ("changes", "writes", "effects"):
            for row in self.h[kind]:
                op = self.owner_at(row["xid"], row.get("at"))
                if op is None:
                    self.unattributed.append((kind, row))
                else:
                    self.rows[id(op)].append((kind, row))

    def owner_at(self, xid, t):
        """The operation that a row written, or a commit made, at server
        time t under transaction id xid belongs to: the latest one with that
        id that began before t and whose server did not restart in between
        (an operation begun before a restart neither writes nor commits
        after it)."""
        lst = self.by_xid.get(xid)
        if not lst:
            return None
        if t is None:
            return lst[-1]
        best = None
        for op in lst:
            t0 = op.get("t0")
            if t0 is not None and t0 > t:
                continue
            if t0 is not None and any(b is not None and a is not None and t0 < b and a <= t
                                      for b, a in self.restart_bounds):
                continue
            best = op
        return best

    def op_of(self, row):
        return self.owner_at(row["xid"], row.get("at"))

    # -- sessions: when was each live --------------------------------------
    #
    # A session lives as long as the server promised it: session_open()
    # until created_at + ttl, each heartbeat that answered true from its
    # call until the call's clock + ttl.  With its heartbeats in shared
    # memory (distlock preloaded) a heartbeat keeps its promise there and
    # writes the row only when the row's expires_at does not cover the
    # promise already, and then writes it ahead (expires_at =
    # heartbeat_at + ttl + A, A at most 3 ttl): a row update promises
    # heartbeat_at + ttl, not its expires_at, and a heartbeat that wrote
    # nothing promised t + ttl for some server time t in its call [t0,
    # t1] (t0 and t1 are the server's clock too).  A crash empties shared
    # memory: from the restart every session lives until its row's
    # expires_at as committed at the crash.  The ttl is the INSERT's
    # expires_at - created_at.  Without shared memory every true heartbeat
    # writes expires_at = heartbeat_at + ttl, the beats add nothing to the
    # rows and the restarts nothing that the rows do not give: the
    # intervals are the rows' [start, expires_at] as before.

    def session_rows(self):
        """Per session: its ttl, its row versions in commit order (commit,
        change), its heartbeats that answered true, and its deletions."""
        self.sess_ttl = {}
        self.sess_versions = collections.defaultdict(list)
        self.sess_deletions = collections.defaultdict(list)
        for a in self.changes:
            if a["tbl"] != "sessions":
                continue
            if a["op"] in ("I", "U"):
                n = a["new"]
                if a["op"] == "I" and n.get("expires") is not None \
                        and n.get("created") is not None:
                    self.sess_ttl[n["id"]] = n["expires"] - n["created"]
                self.sess_versions[n["id"]].append((a.get("commit") or 0, a))
            elif a["op"] == "D":
                self.sess_deletions[a["old"]["id"]].append(a)
        # commit times and the running maximum of expires_at, for covered()
        self.sess_reach = {}
        for sid, vs in self.sess_versions.items():
            top, reach = None, []
            for _, a in vs:
                e = a["new"].get("expires")
                if e is not None and (top is None or e > top):
                    top = e
                reach.append(top)
            self.sess_reach[sid] = ([c for c, _ in vs], reach)
        self.beats = collections.defaultdict(list)
        for op in self.ops:
            if op["op"] == "heartbeat" and op.get("r") is True and op.get("sid") is not None \
                    and op.get("t0") is not None and op.get("t1") is not None:
                self.beats[op["sid"]].append(op)

    def covered(self, sid, t0, t1, ttl):
        """Whether a heartbeat of session sid in [t0, t1] could have found
        its promise (at least t0 + ttl) in the row, written ahead: some
        version committed by t1 reached that far."""
        commits, reach = self.sess_reach.get(sid, ([], []))
        k = bisect.bisect_right(commits, t1)
        return k > 0 and reach[k - 1] is not None and reach[k - 1] >= t0 + ttl

    def beat_update(self, op):
        """The updates of its session's row that heartbeat op committed."""
        return [row for k, row in self.rows.get(id(op), [])
                if k == "changes" and row["tbl"] == "sessions" and row["op"] == "U"
                and row["new"]["id"] == op.get("sid")]

    def beat_committed(self, op):
        """True if heartbeat op committed, None if it may have, False if
        not.  The client saw its COMMIT answered (ok), or pg_xact_status()
        said committed; an unknown outcome (info) not resolved committed
        may still have, if a crash followed it: a transaction that wrote
        nothing commits without waiting for its commit record to reach
        disk, so the crash can lose the record (and pg_xact_status() then
        says aborted) after others saw the commit."""
        if op["outcome"] == "ok":
            return True
        if op["outcome"] != "info":
            return False
        c = self.committed.get(id(op))
        if c:
            return True
        if c is None or any((a if a is not None else b) > op["t0"]
                            for b, a in self.restart_bounds if b is not None):
            return None
        return False

    def sessions(self):
        """The intervals in which each session was live: self.sess, where it
        may have been (an acknowledgement accepted outside them is Q2's),
        and self.sess_sure, where it surely was (a lease of the session
        taken over inside them is L1's)."""
        self.session_rows()
        may = collections.defaultdict(list)
        sure = collections.defaultdict(list)
        for sid, vs in self.sess_versions.items():
            ttl = self.sess_ttl.get(sid)
            for _, a in vs:
                n = a["new"]
                if a["op"] == "I":
                    start, end = n.get("created"), n["expires"]
                else:
                    start = n.get("heartbeat")
                    end = start + ttl if start is not None and ttl is not None \
                        else n["expires"]
                if start is None:
                    start = n.get("created")
                may[sid].append((start, end))
                sure[sid].append((start, end))
        # heartbeats that wrote nothing: the promise of some t in [t0, t1]
        for sid, ops in self.beats.items():
            ttl = self.sess_ttl.get(sid)
            if ttl is None:
                continue
            for op in ops:
                c = self.beat_committed(op)
                if c is False or self.beat_update(op):
                    continue
                # (a committed one that the row did not cover is L6's)
                if c or self.covered(sid, op["t0"], op["t1"], ttl):
                    may[sid].append((op["t0"], op["t1"] + ttl))
                if c and op["t1"] < op["t0"] + ttl:
                    sure[sid].append((op["t1"], op["t0"] + ttl))
        # after a crash: until the row's expires_at as committed at it.  It
        # came after before_us and before after_us: the version last
        # committed by before_us, or one committed in between.
        for b, a in self.restart_bounds:
            if b is None:
                continue
            bound = a if a is not None else b
            for sid, vs in self.sess_versions.items():
                pre = [x for c, x in vs if c <= b]
                mid = [(c, x) for c, x in vs if b < c < bound]
                if pre and pre[-1]["new"]["expires"] > b:
                    may[sid].append((b, pre[-1]["new"]["expires"]))
                    if not mid and pre[-1]["new"]["expires"] > bound:
                        sure[sid].append((bound, pre[-1]["new"]["expires"]))
                for c, x in mid:
                    may[sid].append((c, x["new"]["expires"]))
        # a deletion ends the session: it came before its commit (at) and
        # before the end of the call that made it
        ended = {}
        for sid, dels in self.sess_deletions.items():
            for a in dels:
                end = a["at"]
                op = self.op_of(a)
                if op is not None and op.get("t1") is not None:
                    end = min(end, op["t1"])
                ended[sid] = min(ended.get(sid, end), end)

        def merge(ivs):
            out = {}
            for sid, lst in ivs.items():
                lst.sort()
                merged = []
                for s, e in lst:
                    if merged and s <= merged[-1][1]:
                        merged[-1][1] = max(merged[-1][1], e)
                    else:
                        merged.append([s, e])
                end = ended.get(sid)
                if end is not None:
                    merged = [[s, min(e, end)] for s, e in merged if s < end]
                out[sid] = merged
            return out
        self.sess = merge(may)
        self.sess_sure = merge(sure)

    def live_in(self, sid, lo, hi, sure=False):
        """Whether session sid may have been live at some instant of [lo,
        hi] (sure: whether it surely was live at some instant of it)."""
        for s, e in (self.sess_sure if sure else self.sess).get(sid, []):
            if s <= hi and lo < e:
                return True
        return False

    def promises(self):
        """S1: no session was reaped before its promise ran out.  A deletion
        of a session's row by anything but the session's own
        session_close() (reap(), a claim's reap in passing) was made before
        its commit and before the end of its call; it must not come before
        the latest promise the session had been given before that call
        began: created_at + ttl by its INSERT, heartbeat_at + ttl by a row
        update committed before then, t0 + ttl by a true heartbeat that
        committed (outcome ok, or resolved committed) and ended before
        then, whether it wrote the row or not.  Across a crash too: the
        row's expires_at, which rules after it, is never below a promise."""
        reaps = 0
        for sid, dels in self.sess_deletions.items():
            ttl = self.sess_ttl.get(sid)
            for a in dels:
                op = self.op_of(a)
                if op is None or op.get("t0") is None:
                    continue        # L6's
                if op["op"] == "close" and op.get("sid") == sid:
                    continue
                reaps += 1
                began = op["t0"]
                gone = a["at"] if op.get("t1") is None else min(a["at"], op["t1"])
                best, why = None, None
                for c, v in self.sess_versions.get(sid, []):
                    if c >= began:
                        break
                    n = v["new"]
                    if v["op"] == "I":
                        p = n["expires"]
                    elif ttl is not None and n.get("heartbeat") is not None:
                        p = n["heartbeat"] + ttl
                    else:
                        continue
                    if best is None or p > best:
                        best, why = p, "the row version of xid %s" % v["xid"]
                if ttl is not None:
                    for b in self.beats.get(sid, []):
                        if b["t1"] < began and self.beat_committed(b) and \
                                (best is None or b["t0"] + ttl > best):
                            best = b["t0"] + ttl
                            why = "the heartbeat of xid %s at [%s, %s]%s" % (
                                b.get("xid"), b["t0"], b["t1"],
                                "" if self.beat_update(b) else ", which wrote nothing")
                if best is not None and gone < best:
                    self.flag("S1", "session %s deleted by %s (xid %s, call at [%s, %s],"
                              " commit %s) before its promise ran out at %s, given by %s"
                              % (sid, op["op"], a["xid"], op["t0"], op.get("t1"),
                                 a["at"], best, why))
        self.fig["reaps"] = reaps

    # -- locks ----------------------------------------------------------------

    def locks(self):
        lock_rows = [a for a in self.changes if a["tbl"] == "locks"]
        self.grants = collections.defaultdict(list)     # name -> grant rows
        takeovers = reentries = renews = releases = 0
        for a in lock_rows:
            old, new = a.get("old"), a.get("new")
            if a["op"] == "I" or (a["op"] == "U" and new["token"] != old["token"]):
                self.grants[new["name"]].append(a)
                if a["op"] == "U" and old.get("owner") is not None:
                    if old["owner"] != new["owner"]:
                        takeovers += 1
                    # L1 on the server's rows: the replaced lease had ended
                    end = old.get("expires")
                    done = end is not None and end <= new["acquired"]
                    if not done and old.get("session") is not None:
                        done = not self.live_in(old["session"], new["acquired"],
                                                new["acquired"], sure=True)
                    if not done:
                        self.flag("L1", "grant of token %s on %r to %s at %s replaced token %s"
                                  " of %s whose lease ran to %s (xid %s)"
                                  % (new["token"], new["name"], new["owner"],
                                     new["acquired"], old["token"], old["owner"],
                                     end, a["xid"]))
                elif a["op"] == "U":
                    if old.get("renewed") is not None and old["renewed"] > new["acquired"]:
                        self.flag("L1", "grant of token %s on %r at %s before the release at %s"
                                  % (new["token"], new["name"], new["acquired"], old["renewed"]))
                if a["op"] == "U" and old.get("hold") is not None and old["hold"] > new["acquired"]:
                    self.flag("L1", "grant of token %s on %r at %s within the minimum hold"
                              " of token %s (until %s)" % (new["token"], new["name"],
                                                           new["acquired"], old["token"],
                                                           old["hold"]))
                continue
            if a["op"] != "U":
                continue
            # same token: renew, re-entry or release -- by the holder only (L3)
            op = self.op_of(a)
            if new["owner"] is None and old["owner"] is not None:
                releases += 1
                kinds = ("release",)
            elif new["owner"] == old["owner"]:
                if new.get("acquired") == old.get("acquired") and op and op["op"] == "acquire":
                    reentries += 1
                else:
                    renews += 1
                kinds = ("renew", "acquire")
            else:
                self.flag("L2", "token %s of %r passed from %s to %s without a new grant"
                          % (new["token"], new["name"], old["owner"], new["owner"]))
                continue
            if op is None:
                continue        # reported under L6
            said = op.get("token") if op["op"] != "acquire" else op.get("r")
            if op["op"] not in kinds or op.get("owner") != old["owner"] or (
                    said is not None and said != old["token"]):
                self.flag("L3", "%s by %s (token %s) changed %r held by %s with token %s (xid %s)"
                          % (op["op"], op.get("owner"), op.get("token"), new["name"],
                             old["owner"], old["token"], a["xid"]))

        # L2 on the server: per name, in commit order, tokens strictly increase
        ngrants = 0
        self.grant_of = {}       # (name, token) -> grant row
        for name, gs in self.grants.items():
            seen = {}
            prev = None
            for g in gs:
                tok = g["new"]["token"]
                ngrants += 1
                if tok in seen:
                    self.flag("L2", "token %s of %r granted twice (xids %s and %s)"
                              % (tok, name, seen[tok]["xid"], g["xid"]))
                elif prev is not None and tok < prev["new"]["token"]:
                    self.flag("L2", "token regression on %r: %s committed after %s"
                              " (xids %s, %s)" % (name, tok, prev["new"]["token"],
                                                  prev["xid"], g["xid"]))
                seen[tok] = g
                self.grant_of[(name, tok)] = g
                prev = g
        self.fig["grants"] = ngrants
        self.fig["takeovers"] = takeovers
        self.fig["reentries"] = reentries
        self.fig["renews"] = renews
        self.fig["releases"] = releases

        self.lock_clients()
        self.fenced_writes()

    def lock_clients(self):
        """L1 and L2 in what the clients were told."""
        segs = collections.defaultdict(list)     # name -> [start, end, token, owner]
        by_client = collections.defaultdict(list)
        for op in self.ops:
            if op["op"] in ("acquire", "renew", "release") and op.get("name") is not None:
                by_client[(op["c"], op["i"])].append(op)
        holders = collections.defaultdict(set)   # (name, token) -> owners
        grants = collections.defaultdict(list)   # name -> ok acquires with a token
        for key, lst in by_client.items():
            lst.sort(key=lambda o: o["s"])
            open_seg = {}
            for op in lst:
                name = op["name"]
                mayhave = op["outcome"] == "ok" or op["outcome"] == "info"
                if mayhave and op.get("t0") is not None and name in open_seg:
                    seg = open_seg.pop(name)
                    seg[1] = min(seg[1], op["t0"])
                if op["outcome"] != "ok":
                    continue
                tok = None
                if op["op"] == "acquire" and op.get("r") is not None:
                    tok = op["r"]
                    holders[(name, tok)].add(op.get("owner"))
                    grants[name].append(op)
                elif op["op"] == "renew" and op.get("r"):
                    tok = op.get("token")
                if tok is not None and op.get("ttl") is not None:
                    seg = [op["t1"], op["t0"] + op["ttl"], tok, op.get("owner")]
                    segs[name].append(seg)
                    open_seg[name] = seg
        for name, lst in segs.items():
            lst = sorted(s for s in lst if s[0] < s[1])
            for i, a in enumerate(lst):
                for b in lst[i + 1:]:
                    if b[0] >= a[1]:
                        break
                    if b[2] != a[2]:
                        self.flag("L1", "%r held by %s (token %s) over [%s, %s) and by %s"
                                  " (token %s) over [%s, %s)"
                                  % (name, a[3], a[2], a[0], a[1], b[3], b[2], b[0], b[1]))
        for (name, tok), owners in holders.items():
            if len(owners) > 1:
                self.flag("L2", "token %s of %r handed to %d owners: %s"
                          % (tok, name, len(owners), ", ".join(sorted(map(str, owners)))))
        for name, lst in grants.items():
            by_t1 = sorted(lst, key=lambda o: o["t1"])
            t1s = [o["t1"] for o in by_t1]
            best = []
            m = None
            for o in by_t1:
                if m is None or o["r"] > m["r"]:
                    m = o
                best.append(m)
            for o in lst:
                k = bisect.bisect_left(t1s, o["t0"])
                if k and best[k - 1]["r"] > o["r"]:
                    p = best[k - 1]
                    self.flag("L2", "token regression on %r: %s got %s at [%s, %s] after %s"
                              " got %s at %s" % (name, o.get("owner"), o["r"], o["t0"],
                                                 o["t1"], p.get("owner"), p["r"], p["t1"]))
        self.fig["client_grants"] = sum(len(v) for v in grants.values())
        # what the fence and the holder checks turned away (zombies, mostly)
        self.fig["stale_writes_refused"] = sum(
            1 for o in self.ops if o["op"] == "write" and o["outcome"] == "fail"
            and o.get("err") == "55000")
        self.fig["non_holder_refused"] = sum(
            1 for o in self.ops if o["op"] in ("renew", "release")
            and o["outcome"] == "ok" and o.get("r") is False)

    def fenced_writes(self):
        writes = sorted(self.h["writes"], key=lambda w: (w.get("commit") or 0, w["id"]))
        versions = collections.defaultdict(list)     # name -> [(commit, new row)]
        for a in self.changes:
            if a["tbl"] == "locks" and a.get("new") is not None:
                versions[a["new"]["name"]].append((a.get("commit") or 0, a["new"]))
        version_commits = {n: [c for c, _ in vs] for n, vs in versions.items()}
        grant_pos = {(n, g["id"]): k for n, gs in self.grants.items()
                     for k, g in enumerate(gs)}
        last = {}
        for w in writes:
            name, tok = w["name"], w["token"]
            if name in last and tok < last[name]["token"]:
                self.flag("L4", "resource %r accepted token %s after token %s (xids %s, %s)"
                          % (name, tok, last[name]["token"], last[name]["xid"], w["xid"]))
            last[name] = w
            g = self.grant_of.get((name, tok))
            if g is None:
                self.flag("L4", "resource %r accepted token %s that was never granted (xid %s)"
                          % (name, tok, w["xid"]))
                continue
            gs = self.grants[name]
            k = grant_pos[(name, g["id"])]
            if k + 1 < len(gs):
                nxt = gs[k + 1]["new"]
                if w.get("commit") is not None and nxt["acquired"] < w["commit"]:
                    self.flag("L4", "write with token %s on %r committed at %s, after token %s"
                              " was granted at %s (xid %s)" % (tok, name, w["commit"],
                                                              nxt["token"], nxt["acquired"],
                                                              w["xid"]))
            op = self.op_of(w)
            vs = versions[name]
            j = bisect.bisect_left(version_commits.get(name, []), w.get("commit") or 0) - 1
            if op is not None and op.get("t0") is not None and j >= 0:
                cur = vs[j][1]
                if cur["token"] == tok and cur.get("expires") is not None \
                        and cur["expires"] <= op["t0"]:
                    self.flag("L4", "write with token %s on %r accepted although its lease"
                              " expired at %s, before the call at %s (xid %s)"
                              % (tok, name, cur["expires"], op["t0"], w["xid"]))
        for op in self.ops:
            if op["op"] == "write" and op.get("accepted") is False:
                self.flag("L4", "fence() passed token %s of %r that the resource then"
                          " refused as stale (%s, xid %s)" % (op.get("token"), op.get("name"),
                                                            op.get("owner"), op.get("xid")))
        self.fig["writes_accepted"] = len(writes)

    # -- queue ----------------------------------------------------------------

    def queue(self):
        completions = collections.defaultdict(list)
        claims = collections.Counter()
        enqueued = set()
        for a in self.changes:
            if a["tbl"] != "jobs":
                continue
            if a["op"] == "I":
                enqueued.add(a["new"]["id"])
                continue
            if a["op"] == "D" and a["new"] is None:
                self.flag("Q3", "job %s deleted while %s (xid %s): only an acknowledgement"
                          " deletes a job here" % (a["old"].get("id"), a["old"].get("status"),
                                                   a["xid"]))
                continue
            old, new = a["old"], a["new"]
            # every update that leaves a job completed is an accepted
            # acknowledgement (nothing else may touch a completed job)
            if new["status"] == "completed":
                completions[new["id"]].append(a)
            if new["status"] == "running" and old["status"] == "pending":
                claims[new["id"]] += 1
            # Q5: a claim never takes a job from a session that held it and
            # was surely live (a job handed back by a reap went through
            # pending, and an early reap is S1's)
            if new["status"] == "running" and old["status"] == "running" \
                    and old.get("session") != new.get("session") \
                    and old.get("session") is not None \
                    and self.live_in(old["session"], new.get("claimed") or a["at"],
                                     new.get("claimed") or a["at"], sure=True):
                self.flag("Q5", "job %s claimed by session %s at %s while running for"
                          " session %s, live then (live %s; xid %s)"
                          % (new["id"], new.get("session"), new.get("claimed"),
                             old["session"], self.sess_sure.get(old["session"]), a["xid"]))
        effects = collections.defaultdict(list)
        for e in self.h["effects"]:
            effects[e["job"]].append(e)
        jobs = {j["id"]: j for j in self.h["jobs"]}
        all_ids = set(jobs) | enqueued | set(completions) | set(effects)
        if not all_ids and not any(o["op"] in ("ack", "ack_batch", "ack_batch_claim", "claim")
                                   for o in self.ops):
            return False

        for jid in sorted(all_ids):
            cs, es = completions.get(jid, []), effects.get(jid, [])
            if len(cs) > 1:
                self.flag("Q1", "job %s completed %d times (xids %s)"
                          % (jid, len(cs), ", ".join(str(c["xid"]) for c in cs)))
            if len(es) != len(cs) or (cs and es and {e["xid"] for e in es} != {c["xid"] for c in cs}):
                self.flag("Q1", "job %s: %d effects (xids %s) for %d acknowledgements (xids %s)"
                          % (jid, len(es), [e["xid"] for e in es], len(cs), [c["xid"] for c in cs]))
            j = jobs.get(jid)
            if deleted(cs) and j is None:
                continue
            if j is None or j["status"] != "completed" or not cs:
                self.flag("Q3", "job %s not completed: %s at the end, %d acknowledgements"
                          % (jid, j["status"] if j else "missing", len(cs)))
        gone = sum(1 for cs in completions.values() if deleted(cs))
        want = self.h["meta"].get("jobs")
        if want and len(jobs) + gone < want:
            self.flag("Q3", "%d jobs enqueued, %d left in the queue and %d deleted by their"
                      " acknowledgement" % (want, len(jobs), gone))

        # Q2: accepted acknowledgements came from the claimer, while live
        late = 0
        for jid, cs in completions.items():
            for c in cs:
                sid = c["old"].get("session")
                op = self.op_of(c)
                fin = c["new"].get("finished") or \
                    (op.get("t1") if c["op"] == "D" and op is not None else None) or c["at"]
                lo = op["t0"] if op is not None and op.get("t0") is not None else fin
                if op is not None and op.get("sid") is not None and op["sid"] != sid:
                    self.flag("Q2", "job %s acknowledged by session %s but claimed by %s (xid %s)"
                              % (jid, op["sid"], sid, c["xid"]))
                if sid is None or not self.live_in(sid, lo, fin):
                    self.flag("Q2", "job %s acknowledged at [%s, %s] by session %s, not live then"
                              " (live %s; xid %s)" % (jid, lo, fin, sid,
                                                      self.sess.get(sid), c["xid"]))
                elif c.get("commit") is not None and not self.live_in(sid, c["commit"], c["commit"]):
                    late += 1

        # Q4 and figures from the workers' side: a batch is one answer per
        # id asked (acknowledged if returned, refused if not)
        zombie = refused_other = acks_ok = 0
        batches = collections.Counter()
        bclaims = collections.Counter()

        def refused(op, n, gone=()):
            """n answers of op refused: a zombie's if its session was not
            live at the call, or (a call that raised, whose clock is not
            known) if one of the jobs gone was completed by another
            session."""
            nonlocal zombie, refused_other
            if op.get("t0") is not None and \
                    not self.live_in(op.get("sid"), op["t0"], op["t0"]) or \
                    any(c["old"].get("session") != op.get("sid")
                        for j in gone for c in completions.get(j, [])):
                zombie += n
            else:
                refused_other += n

        for op in self.ops:
            if op["op"] == "ack_batch":
                batches[op["outcome"]] += 1
            if op["op"] == "ack_batch_claim":
                bclaims[op["outcome"]] += 1
                if op["outcome"] == "fail" and op.get("err") in ("55000", "42704"):
                    # a refusal of the whole batch, one answer per id
                    bclaims["refused"] += 1
                    refused(op, len(set(op.get("jobs") or [])))
                    continue
            if op["op"] in ("ack", "ack_batch") and op["outcome"] == "fail" \
                    and op.get("err") == "42704":
                # with distlock.delete_completed a job acknowledged before
                # is gone, and acknowledging it raises 42704: a refusal (of
                # the whole batch), one answer per id
                ids = [op.get("job")] if op["op"] == "ack" else sorted(set(op.get("jobs") or []))
                refused(op, len(ids), ids)
                continue
            if op["op"] not in ("ack", "ack_batch", "ack_batch_claim") or op["outcome"] != "ok":
                continue
            if op["op"] == "ack_batch_claim":
                answers = [True] * len(acked_jobs(op))
                bclaims["acked"] += len(answers)
                bclaims["claimed"] += len(op.get("r") or [])
            elif op["op"] == "ack":
                answers = [bool(op.get("r"))]
            else:
                got = set(op.get("r") or [])
                answers = [j in got for j in sorted(set(op.get("jobs") or []))]
                batches["asked"] += len(answers)
                batches["acked"] += sum(answers)
            for acked in answers:
                if acked:
                    acks_ok += 1
                else:
                    refused(op, 1)
        # the completions that complete_batch() made, as the WAL has them
        batches["completions"] = sum(
            1 for cs in completions.values() for c in cs
            if (self.op_of(c) or {}).get("op") == "ack_batch")
        # the calls of complete_batch_and_claim() that committed, and their
        # completions, as the WAL has them
        bclaims["completions"] = sum(
            1 for cs in completions.values() for c in cs
            if (self.op_of(c) or {}).get("op") == "ack_batch_claim")
        bclaims["committed"] = sum(
            1 for op in self.ops if op["op"] == "ack_batch_claim"
            and op["outcome"] in ("ok", "info") and self.committed.get(id(op)))
        self.fig["jobs"] = len(all_ids)
        self.fig["completed"] = sum(1 for j in jobs.values() if j["status"] == "completed") + gone
        self.fig["deleted_by_ack"] = gone
        self.fig["claims"] = sum(claims.values())
        self.fig["redeliveries"] = sum(n - 1 for n in claims.values() if n > 1)
        self.fig["acks_accepted"] = acks_ok
        self.fig["zombie_acks_refused"] = zombie
        self.fig["acks_refused_other"] = refused_other
        self.fig["acks_committed_after_expiry"] = late
        self.fig["batches"] = batches
        self.fig["batch_claims"] = bclaims
        self.fig["effects"] = sum(len(v) for v in effects.values())
        return True

    # -- L5, L6 ---------------------------------------------------------------

    def attribution(self):
        for kind, row in self.unattributed:
            self.flag("L6", "%s row (xid %s, at %s) belongs to no operation" % (kind, row["xid"], row.get("at")))
        resolved = collections.Counter()
        self.fig["noop_commits_lost"] = 0
        self.fig["beat_commits_lost"] = 0
        for op in self.ops:
            rows = self.rows.get(id(op), [])
            c = self.committed.get(id(op))
            x = self.xact.get(op.get("xid"))
            if op["outcome"] == "info":
                resolved["committed" if c else "aborted" if c is False else "unknown"] += 1
            if op["outcome"] == "fail" and c and op.get("xid") is not None:
                self.flag("L6", "%s by %s failed (%s) but its transaction committed (xid %s)"
                          % (op["op"], op.get("owner") or op["c"], op.get("err"), op["xid"]))
            elif rows and c is False:
                if op["outcome"] == "fail":
                    self.flag("L6", "%s by %s failed (%s) but its changes committed (xid %s)"
                              % (op["op"], op.get("owner") or op["c"], op.get("err"), op["xid"]))
                else:
                    self.flag("L6", "%s by %s (%s) resolved as not committed but its changes"
                              " are there (xid %s)" % (op["op"], op.get("owner") or op["c"],
                                                       op["outcome"], op["xid"]))
            if op["outcome"] == "info" and c and "r" in op:
                # resolved committed: its changes must be there
                self.expect_rows(op, rows)
            if op["outcome"] != "ok":
                continue
            if x is not None and not c and op.get("xid") is not None:
                if op["op"] == "heartbeat" and op.get("r"):
                    # A heartbeat that wrote nothing (shared memory kept
                    # its promise, the row already covered it) commits
                    # like a refusal; one that wrote and lost its commit
                    # left no row that covers its promise (expect_rows).
                    self.fig["beat_commits_lost"] += 1
                elif changed(op):
                    self.flag("L6", "%s by %s was acknowledged but did not commit (xid %s: %s)"
                              % (op["op"], op.get("owner") or op["c"], op["xid"],
                                 x.get("status")))
                else:
                    # A transaction that wrote nothing but its commit record
                    # (an xid taken by pg_current_xact_id(), then a refusal
                    # that locked nothing) commits without waiting for the
                    # WAL flush: a crash right after it can lose the record,
                    # and the id is handed out again.  Nothing was lost.
                    self.fig["noop_commits_lost"] += 1
            self.expect_rows(op, rows)
        self.fig["info_resolved"] = dict(resolved)

    def expect_rows(self, op, rows):
        kind, r = op["op"], op.get("r")
        locks = [row for k, row in rows if k == "changes" and row["tbl"] == "locks"]
        jobs = [row for k, row in rows if k == "changes" and row["tbl"] == "jobs"]
        sess = [row for k, row in rows if k == "changes" and row["tbl"] == "sessions"]
        writes = [row for k, row in rows if k == "writes"]
        effects = [row for k, row in rows if k == "effects"]
        who = op.get("owner") or op["c"]

        def missing(what):
            self.flag("L6", "%s by %s answered %r but left no %s (xid %s)"
                      % (kind, who, r, what, op.get("xid")))

        def extra(what):
            self.flag("L6", "%s by %s answered %r yet changed %s (xid %s)"
                      % (kind, who, r, what, op.get("xid")))

        if kind == "acquire":
            if r is None and locks:
                extra("the lock")
            if r is not None and not any(a["new"] and a["new"]["owner"] == op.get("owner")
                                         and a["new"]["token"] == r for a in locks):
                missing("grant with that token")
        elif kind in ("renew", "release"):
            # (whose lock it changed is L3's business)
            if not r and locks:
                extra("the lock")
            if r and not any(a["op"] == "U" for a in locks):
                missing("lock change")
        elif kind == "write":
            if locks or jobs:
                extra("distlock's tables")
            if op.get("accepted") and not writes:
                self.flag("L5", "write with token %s on %r by %s acknowledged but not in"
                          " the resource (xid %s)" % (op.get("token"), op.get("name"),
                                                      who, op.get("xid")))
            if not op.get("accepted") and writes:
                extra("the resource")
        elif kind == "ack":
            done = [a for a in jobs if a["new"] and a["new"]["status"] == "completed"
                    and a["new"]["id"] == op.get("job")]
            if r and (not done or not effects):
                missing("completed job and effect")
            if not r and (done or effects):
                extra("the job")
        elif kind == "ack_batch":
            # per id, what "ack" is per job: an id returned left its job
            # completed and its effect, an id left out neither; the answer
            # names only ids asked, each once, in ascending order
            asked, got = set(op.get("jobs") or []), r or []
            if got != sorted(set(got)) or not set(got) <= asked:
                self.flag("L6", "ack_batch by %s asked %s and answered %s: not ids asked,"
                          " each once, in ascending order (xid %s)"
                          % (who, op.get("jobs"), r, op.get("xid")))
            done = {a["new"]["id"] for a in jobs if a["new"] and a["new"]["status"] == "completed"}
            did = {e["job"] for e in effects}
            for jid in sorted(set(got)):
                if jid not in done or jid not in did:
                    missing("completed job %s and its effect" % jid)
            for jid in sorted((done | did) - set(got)):
                extra("job %s, which it did not return" % jid)
        elif kind == "ack_batch_claim":
            # every id asked acknowledged, each with its effect, and no
            # other; then the jobs it returned claimed, as by a claim
            asked = set(op.get("jobs") or [])
            done = {a["new"]["id"] for a in jobs if a["new"] and a["new"]["status"] == "completed"}
            did = collections.Counter(e["job"] for e in effects)
            for jid in sorted(asked):
                if jid not in done or jid not in did:
                    missing("completed job %s and its effect" % jid)
            for jid in sorted((done | set(did)) - asked):
                extra("job %s, which it was not asked" % jid)
            self.expect_claims(op, jobs)
        elif kind == "claim":
            self.expect_claims(op, jobs)
        elif kind == "heartbeat":
            # A true heartbeat promised its session life until t + ttl, t
            # its clock in [t0, t1] (the server's clock, as t0 and t1 are).
            # It wrote the row at most once: heartbeat_at = t, expires_at =
            # t + ttl + A, A from 0 (without shared memory, exactly t +
            # ttl) to 3 ttl; or, with shared memory, nothing at all when a
            # version of the row committed before it already reached its
            # promise, written ahead, so that a crash cannot lose it.
            sid = op.get("sid")
            upd = [a for a in sess if a["op"] == "U" and a["new"]["id"] == sid]
            if not r and upd:
                extra("the session")
            ttl = self.sess_ttl.get(sid)
            t0, t1 = op.get("t0"), op.get("t1")
            if r and len(upd) > 1:
                extra("its session's row %d times" % len(upd))
            for a in upd if r else []:
                hb, exp = a["new"].get("heartbeat"), a["new"].get("expires")
                if hb is None or (t0 is not None and t1 is not None and not t0 <= hb <= t1):
                    self.flag("L6", "heartbeat by %s at [%s, %s] wrote heartbeat_at %s"
                              " (xid %s)" % (who, t0, t1, hb, op.get("xid")))
                elif ttl is not None and exp is not None and \
                        not hb + ttl <= exp <= hb + 4 * ttl:
                    self.flag("L6", "heartbeat by %s wrote expires_at %s, not within"
                              " [ttl, 4 ttl] of its heartbeat_at %s (ttl %s; xid %s)"
                              % (who, exp, hb, ttl, op.get("xid")))
            if r and not upd and ttl is not None and t0 is not None and t1 is not None \
                    and not self.covered(sid, t0, t1, ttl):
                self.flag("L6", "heartbeat by %s answered true and wrote nothing, but no"
                          " version of session %s's row committed by the end of the call"
                          " (%s) reached its promise (%s at the earliest; xid %s)"
                          % (who, sid, t1, t0 + ttl, op.get("xid")))
        elif kind == "open":
            if not any(a["op"] == "I" and a["new"]["id"] == r for a in sess):
                missing("session")

    def expect_claims(self, op, jobs):
        """A claim's answer (a claim, or the claim of a
        complete_batch_and_claim) names the jobs its transaction claimed,
        each once, and they were claimed for its session."""
        r = op.get("r")
        rows = claimed_rows(jobs)
        got = sorted(a["new"]["id"] for a in rows)
        if sorted(r or []) != got or len(set(r or [])) != len(r or []):
            self.flag("L6", "%s by %s returned jobs %s but claimed %s (xid %s)"
                      % (op["op"], op.get("owner") or op["c"], r, got, op.get("xid")))
        other = sorted(a["new"]["id"] for a in rows if op.get("sid") is not None
                       and a["new"].get("session") != op["sid"])
        if other:
            self.flag("L6", "%s by session %s claimed jobs %s for another session (xid %s)"
                      % (op["op"], op.get("sid"), other, op.get("xid")))

    # -- fault floors -----------------------------------------------------------

    def faults(self):
        fl = self.h["faults"]
        n = collections.Counter(f["k"] for f in fl)
        seen = collections.Counter()
        for op in self.ops:
            if op["outcome"] in ("fail", "info") and op.get("err"):
                seen[op["err"]] += 1
        self.fig["client_errors"] = dict(seen)
        outlived = zombies = 0
        pending = {}
        for f in fl:
            if f["k"] == "pause":
                pending[f["pid"]] = f
            elif f["k"] == "resume" and f["pid"] in pending:
                p = pending.pop(f["pid"])
                at = f.get("at_us")
                if at is None and f.get("stopped_s") is not None \
                        and p.get("until_us") is not None:
                    # resumed while the server was down: the stop's length
                    # by the harness's clock against what was left of the
                    # session or lease when it was read, before the stop
                    at = p["start_us"] + int(f["stopped_s"] * 1e6)
                if at is not None and p.get("until_us") is not None and at > p["until_us"]:
                    outlived += 1
                    if p.get("what") == "lease" and p.get("name") is not None:
                        owner_pid = str(p["pid"])
                        for g in self.grants.get(p["name"], []):
                            new = g["new"]
                            if p["start_us"] <= new["acquired"] <= at and \
                                    not str(new["owner"]).endswith("@" + owner_pid):
                                zombies += 1
                                break
        got = dict(term=n["term"], kill=n["kill"], pause=n["pause"],
                   pause_outlived=outlived, zombie_takeovers=zombies,
                   restart=n["restart"], crash=n["crash"],
                   term_seen=seen["terminated"] + seen["57P01"],
                   grants=self.fig.get("grants", 0),
                   takeovers=self.fig.get("takeovers", 0),
                   zombie_refused=self.fig.get("stale_writes_refused", 0)
                   + self.fig.get("non_holder_refused", 0),
                   zombie_acks=self.fig.get("zombie_acks_refused", 0),
                   redeliveries=self.fig.get("redeliveries", 0),
                   batch_acks=self.fig.get("batches", {}).get("completions", 0),
                   batch_claims=self.fig.get("batch_claims", {}).get("committed", 0))
        self.fig["faults"] = {k: got[k] for k in ("term", "term_seen", "kill", "pause",
                                                   "pause_outlived", "zombie_takeovers",
                                                   "restart", "crash")}
        return got

    # -- restarts: tokens never reused ---------------------------------------

    def restarts(self):
        out = []
        for r in self.h["meta"].get("restarts", []):
            b, a = r.get("before_us"), r.get("after_us")
            if b is None:
                continue
            before = [g["new"]["token"] for gs in self.grants.values() for g in gs
                      if (g.get("commit") or 0) <= b]
            after = [g["new"]["token"] for gs in self.grants.values() for g in gs
                     if a is not None and (g.get("commit") or 0) >= a]
            out.append((r["kind"], max(before) if before else None,
                        min(after) if after else None))
            if before and after and min(after) <= max(before):
                self.flag("L2", "after the %s restart the first token %s is not above %s"
                          % (r["kind"], min(after), max(before)))
        self.fig["restart_tokens"] = out

    def run(self):
        self.index()
        self.sessions()
        self.locks()
        self.has_queue = self.queue()
        self.promises()
        self.attribution()
        self.restarts()
        return self.v


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------

def report(path):
    h = load(path)
    meta = h["meta"]
    fo = meta.get("failover")
    if fo:
        attribute_waits(h)
    ck = Check(h)
    v = ck.run()
    got = ck.faults()
    f = ck.fig
    name = meta.get("name") or meta.get("scenario", "history")
    ops = collections.Counter()
    outcomes = collections.Counter()
    for op in h["ops"]:
        ops[op["op"]] += 1
        outcomes[op["outcome"]] += 1
    print("# %s (%s, seed %s, %s): %s s" % (meta.get("title", name), meta.get("mode"),
                                            meta.get("seed"),
                                            "through PgBouncer" if meta.get("pool") else "direct connections",
                                            meta.get("end_s")))
    print("# operations %d: %s; ok %d, definite failures %d, unknown %d (resolved by"
          " pg_xact_status: %s)"
          % (sum(ops.values()), ", ".join("%s %d" % kv for kv in sorted(ops.items())),
             outcomes["ok"], outcomes["fail"], outcomes["info"],
             ", ".join("%s %d" % kv for kv in sorted(f["info_resolved"].items())) or "none"))
    if f["noop_commits_lost"] or f["beat_commits_lost"]:
        print("# acknowledged refusals and true heartbeats whose commit record a crash lost,"
              " their id handed out again (they wrote nothing, so nothing was lost): %d"
              " refusals, %d heartbeats" % (f["noop_commits_lost"], f["beat_commits_lost"]))
    if f.get("grants"):
        print("# leases: grants %d (takeovers of expired leases %d), re-entries %d, renews %d,"
              " releases %d; fenced writes accepted %d, refused by fence %d; renews and"
              " releases refused to non-holders %d"
              % (f["grants"], f["takeovers"], f["reentries"], f["renews"], f["releases"],
                 f["writes_accepted"], f["stale_writes_refused"], f["non_holder_refused"]))
    if ck.has_queue:
        print("# queue: jobs %d, completed %d, claims %d, re-deliveries %d, acks accepted %d,"
              " zombie acks refused %d, other refused acks %d, effects %d,"
              " acks committed after their session's expiry (decided before it) %d"
              % (f["jobs"], f["completed"], f["claims"], f["redeliveries"],
                 f["acks_accepted"], f["zombie_acks_refused"], f["acks_refused_other"],
                 f["effects"], f["acks_committed_after_expiry"]))
        b = f["batches"]
        if b:
            print("# batch acknowledgements (complete_batch): %d calls (ok %d, definite"
                  " failures %d, unknown %d), %d ids asked in the answered ones, %d"
                  " acknowledged; %d completions in the WAL by complete_batch"
                  % (b["ok"] + b["fail"] + b["info"], b["ok"], b["fail"], b["info"],
                     b["asked"], b["acked"], b["completions"]))
        b = f["batch_claims"]
        if b:
            print("# batches acknowledged and the next claimed (complete_batch_and_claim):"
                  " %d calls (ok %d, definite failures %d of which %d refusals, unknown %d),"
                  " %d committed; %d ids acknowledged and %d jobs claimed in the answered"
                  " ones; %d completions in the WAL by complete_batch_and_claim"
                  % (b["ok"] + b["fail"] + b["info"], b["ok"], b["fail"], b["refused"],
                     b["info"], b["committed"], b["acked"], b["claimed"], b["completions"]))
    print("# faults: %s" % ", ".join("%s %d" % kv for kv in f["faults"].items()))
    print("# client errors: %s" % ", ".join("%s %d" % kv for kv in
                                           sorted(f["client_errors"].items())))
    rt = [r for r in f.get("restart_tokens", []) if r[1] is not None]
    if rt:
        print("# restarts (kind, last token before, first token after): %s"
              % ", ".join("%s %s -> %s" % r for r in rt))
    print("# violations: %s" % ", ".join("%s %d" % (i, len(v.get(i, []))) for i in INVARIANTS))

    def line(ok, text):
        print("%s - %s: %s" % ("ok" if ok else "not ok", name, text))

    def verdict(inv, text, applies=True):
        if not applies:
            return
        msgs = v.get(inv, [])
        if fo and fo["mode"] == "async":
            # an asynchronous failover loses acknowledged commits: the
            # invariants do not hold across it, failover_report() says what does
            print("# %s %s -- not asserted across an asynchronous failover: %d violations"
                  % (inv, text, len(msgs)))
            return
        line(not msgs, "%s %s%s" % (inv, text, "" if not msgs else " -- %d violations" % len(msgs)))
        for m in msgs[:EXAMPLES]:
            print("#   %s" % m)

    locks = bool(f.get("grants"))
    verdict("L1", "no overlapping leases in server time (%d grants)" % f.get("grants", 0), locks)
    verdict("L2", "tokens strictly increasing per name in commit order, never reused", locks)
    verdict("L3", "no renew or release accepted from a non-holder", locks)
    verdict("L4", "no stale fenced write accepted (%d accepted)" % f.get("writes_accepted", 0), locks)
    verdict("L5", "every acknowledged fenced write is in the resource", locks)
    verdict("L6", "every change belongs to a committed operation; no committed definite"
            " failure; indeterminate commits resolved (%s)"
            % ", ".join("%s %d" % kv for kv in sorted(f["info_resolved"].items())))
    q = ck.has_queue
    verdict("Q1", "every job completed exactly once, one effect each", q)
    verdict("Q2", "no acknowledgement accepted from an expired or foreign session", q)
    verdict("Q3", "no job lost (%d of %d completed)" % (f.get("completed", 0), f.get("jobs", 0)), q)
    verdict("Q5", "no job claimed from a live session that held it", q)
    verdict("S1", "no session reaped before its promise ran out (%d reaps)" % f.get("reaps", 0),
            q or bool(f.get("reaps")))

    if "wal_lines" in meta:
        ok, text, notes = wal_complete(h)
        line(ok, text)
        for m in notes[:EXAMPLES]:
            print("#   %s" % m)
    if "diverters" in meta:
        ok, text = which_path(h, ck)
        line(ok, text)

    pers = meta.get("persistence", [])
    if pers:
        bad = [p for p in pers if p[2] != "p"]
        line(not bad, "every distlock table, index and sequence is WAL-logged (%d relations%s)"
             % (len(pers), "; not: %s" % bad if bad else ""))
    live = meta.get("liveness")
    if live:
        line(not live["failed"] and live["worst_s"] <= live["bound_s"],
             "liveness: after the faults every name was acquired within %.2f s (bound %.1f s)%s"
             % (live["worst_s"], live["bound_s"],
                "; never: %s" % live["failed"] if live["failed"] else ""))
    if meta.get("jobs"):
        drained = meta.get("drained") and not meta.get("timed_out")
        line(drained, "liveness: the queue %s %.1f s after the faults stopped (bound %d s)"
             % ("drained" if drained else "had not drained", meta.get("drain_s") or -1,
                meta.get("drain_bound_s", 30)))
    floors = meta.get("floors", {})
    if floors:
        short = ["%s %d < %d" % (k, got.get(k, 0), m) for k, m in floors.items()
                 if got.get(k, 0) < m]
        line(not short, "faults happened: %s%s"
             % (", ".join("%s %d >= %d" % (k, got.get(k, 0), m) for k, m in floors.items()
                          if got.get(k, 0) >= m),
                "; too few: " + ", ".join(short) if short else ""))
    if fo:
        failover_report(h, ck, line)
    if meta.get("timed_out"):
        line(False, "the run hit its time limit")


# ---------------------------------------------------------------------------
# Failovers (test/failover): the primary killed, its standby promoted.  The
# history's server side is the old primary's up to the new timeline's
# switchpoint, then the new primary's; meta.json's "failover" has the times
# (server clock: kill_us just before the kill, promoted_us once the standby
# wrote, open_us once clients could connect) and "restarts" the failover as
# a restart, for the transaction ids handed out again.
# ---------------------------------------------------------------------------

def attribute_waits(h):
    """A waiting call (CALL distlock.acquire() or claim_wait(), marked
    "wait" in its record) commits transactions of its own while it waits:
    heartbeats of its session, claims that reap expired sessions in
    passing.  Their ids are nowhere in the client's records, so a change
    under an id no operation owns, committed while such a call was in
    flight, is given to that call as an operation of kind "wait" (which no
    answer describes).  Any other change under an unknown id is still L6's."""
    waits = collections.defaultdict(list)
    for op in h["ops"]:
        if op.get("wait") and op.get("t0") is not None:
            waits[(op["c"], op["i"])].append(op)
    if not waits:
        return
    spans = []
    for lst in waits.values():
        mine = sorted((o for o in h["ops"] if (o["c"], o["i"]) == (lst[0]["c"], lst[0]["i"])
                       and o.get("t0") is not None), key=lambda o: o["t0"])
        for op in lst:
            # a call cut short ends, at the latest, when its client's next
            # began, and with its server
            end = op.get("t1") or min(
                [o["t0"] for o in mine if o["t0"] > op["t0"]]
                + [r["before_us"] for r in h["meta"].get("restarts", [])
                   if r.get("before_us") and r["before_us"] > op["t0"]] + [2 ** 62])
            spans.append((op["t0"], end, op))
    ck = Check(h)
    ck.index()
    seen = set()
    for kind, row in ck.unattributed:
        hit = [w for lo, hi, w in spans if lo <= (row.get("at") or 0) <= hi]
        if kind != "changes" or not hit or row["xid"] in seen:
            continue
        seen.add(row["xid"])
        # calls overlap: a heartbeat is its session's call's, a reap a claim's
        sid = (row.get("new") or row.get("old") or {}).get("id") \
            if row["tbl"] == "sessions" else None
        w = min(hit, key=lambda w: (w.get("sid") is None or w["sid"] != sid,
                                    w["op"] != "claim"))
        h["ops"].append(dict(k="op", c=w["c"], i=w["i"], s=w["s"], op="wait", outcome="ok",
                             xid=row["xid"], t0=w["t0"], t1=row["at"], sid=w.get("sid")))


def failover_report(h, ck, line):
    """The failover's figures, and what must hold across it in either mode:
    the clients found the new primary; every token granted after the
    promotion is larger than every token handed out before the kill; no
    fenced write after the promotion passed with a token from before unless
    its lease came through.  Synchronous: nothing acknowledged was lost,
    and the jobs that dead sessions held came back in time, each after its
    session had expired.  Asynchronous: how much the lag lost (it must have
    lost grants, or the token check saw nothing)."""
    fo = h["meta"]["failover"]
    sync = fo["mode"] != "async"
    kill, prom = fo["kill_us"], fo["promoted_us"]

    def s(t):
        return (t - kill) / 1e6

    ok_ops = [o for o in h["ops"] if o["outcome"] == "ok" and o.get("t0") is not None]
    after = [o for o in ok_ops if o["t0"] >= prom and not str(o["c"]).startswith("H")]
    first = min((o["t1"] for o in after), default=None)
    print("# failover (%s, %s): primary gone %.2f s after the kill, standby promoted"
          " after %.2f s, its slot created and the gate open after %.2f s; first client"
          " operation on the new primary %s s after the kill (failover time)"
          % (fo["mode"], fo["topology"], fo["killed_s"], fo["promoted_s"], fo["open_s"],
             "%.2f" % s(first) if first else "never"))
    print("# history: %d transactions of the old primary up to the switchpoint %s"
          " (timeline %d begins), %d committed on it after the switchpoint (lost)%s;"
          " %d lines from the new primary's slot"
          % (fo["old_commits_kept"], fo["switchpoint"], fo["timeline"],
             fo["old_commits_after_switch"],
             ", %d of the new primary's that it replayed as its follower"
             % fo["old_commits_followed"] if fo.get("old_commits_followed") else "",
             fo["new_lines"]))
    line(first is not None, "failover: the clients found the promoted standby by themselves"
         " (%d operations on it, the first %s s after the kill)"
         % (len(after), "%.2f" % s(first) if first else "never"))

    # Tokens: handed out on the old primary (to a client, or in the history
    # the standby replayed) and granted on the new one.  Whatever ended
    # before the promotion ran on the old primary (the kill may land a few
    # milliseconds after kill_us), whatever began after it on the new one.
    grants = [g for gs in ck.grants.values() for g in gs]
    pre = [g for g in grants if (g.get("commit") or 0) < prom]
    post = [g for g in grants if (g.get("commit") or 0) >= prom]
    given = [o for o in ok_ops if o["op"] == "acquire" and o.get("r") is not None]
    before = [(o["name"], o["r"]) for o in given if o["t1"] < prom] + \
        [(g["new"]["name"], g["new"]["token"]) for g in pre]
    carried = {(g["new"]["name"], g["new"]["token"], g["new"]["owner"]) for g in pre}
    # (a holder of a lease that came through re-enters it with its token)
    later = [(o["name"], o["r"]) for o in given if o["t0"] >= prom
             and (o["name"], o["r"], o.get("owner")) not in carried] + \
        [(g["new"]["name"], g["new"]["token"]) for g in post]
    maxb = max((t for _, t in before), default=None)
    minl = min((t for _, t in later), default=None)
    bad = sorted({n for n, t in later for m, b in before if n == m and t <= b})
    ok = maxb is not None and minl is not None and minl > maxb and not bad
    line(ok, "tokens: every token granted after the promotion is larger than every token"
         " handed out before the failover, per name and overall (max before %s, min after %s%s)"
         % (maxb, minl, "; not on %s" % ", ".join(map(repr, bad[:5])) if bad else ""))

    # Fencing: a write accepted after the promotion carries a token granted
    # on the new timeline, above everything before, or that of a lease the
    # standby had replayed (it came through the failover with its holder).
    fresh = {(g["new"]["name"], g["new"]["token"]) for g in post}
    accepted = [(o["name"], o["token"], o["owner"], "fence() by %s" % o["owner"])
                for o in ok_ops if o["op"] == "write" and o.get("accepted")
                and o["t0"] >= prom]
    accepted += [(w["name"], w["token"], w["owner"], "the resource (xid %s)" % w["xid"])
                 for w in h["writes"] if (w.get("commit") or 0) >= prom]
    stale = [a for a in accepted if (a[0], a[1], a[2]) not in carried
             and not ((a[0], a[1]) in fresh and maxb is not None and a[1] > maxb)]
    line(not stale, "fencing: after the promotion no fenced write passed with a token from"
         " before the failover, unless its lease came through the failover (%d accepted, %d"
         " with a lease that came through)%s"
         % (len(accepted), sum(1 for a in accepted if a[:3] in carried),
            "; stale: " + "; ".join("token %s of %r by %s" % (a[1], a[0], a[3])
                                    for a in stale[:3]) if stale else ""))

    # What the lag lost: acknowledged by the old primary, not in the
    # history the standby replayed.
    acked = {(o["name"], o["r"], o.get("owner")) for o in given if o["t1"] < prom}
    lost = [k for k in acked if k not in carried]
    done = {(a["new"]["id"], a["old"].get("session")) for a in ck.changes
            if a["tbl"] == "jobs" and a["new"] and a["new"]["status"] == "completed"
            and (a.get("commit") or 0) < prom}
    acks = [(j, o["sid"]) for o in ok_ops for j in acked_jobs(o) if o["t1"] < prom]
    lost_acks = [a for a in acks if a not in done]
    print("# lost to lag: %d of %d acknowledged grants, %d of %d acknowledged completions%s"
          % (len(lost), len(acked), len(lost_acks), len(acks),
             " (walreceiver stopped %.1f s before the kill, %d tokens drawn in the first"
             " part of it)"
             % (fo["lag_s"], fo["lag_tokens_drawn"]) if "lag_s" in fo else ""))
    if sync:
        line(not lost and not lost_acks, "sync: no acknowledged grant or completion was lost"
             " (%d grants and %d completions acknowledged by the old primary)"
             % (len(acked), len(acks)))
    else:
        line(bool(lost), "async: acknowledged grants were lost to the lag, so the token check"
             " saw lost tokens (%d grants lost, the last %s)"
             % (len(lost), max((t for _, t, _ in lost), default=None)))

    # Re-delivery: jobs running at the switch whose next claim was by
    # another session (their holder's session died: the worker killed with
    # the primary, or one that did not come back within its ttl).  A job
    # its holder acknowledged or failed after the failover was not lost.
    held, back = {}, {}
    for a in ck.changes:
        if a["tbl"] != "jobs" or a["op"] == "I" or a["new"] is None:
            continue
        jid, c = a["new"]["id"], a.get("commit") or 0
        if c < prom:
            if a["new"]["status"] == "running":
                held[jid] = a["new"]["session"]
            else:
                held.pop(jid, None)
        elif jid in held and jid not in back:
            op = ck.op_of(a)
            if op is not None and op["op"] in ("ack", "ack_batch", "ack_batch_claim", "fail") \
                    and op.get("sid") == held[jid]:
                back[jid] = None
            elif a["new"]["status"] == "running":
                back[jid] = a if a["new"]["session"] != held[jid] else None
    moved = {j: a for j, a in back.items() if a is not None}
    early = [j for j, a in moved.items() if ck.live_in(held[j], a["new"]["claimed"],
                                                       a["new"]["claimed"], sure=True)]
    worst = max((((a.get("commit") or 0) - prom) / 1e6 for a in moved.values()), default=None)
    bound = fo.get("redelivery_bound_s")
    print("# re-delivery: %d jobs running at the kill, %d of them claimed again by another"
          " session (their own died: %d sessions), the last %s s after the promotion"
          % (len(held), len(moved), len({held[j] for j in moved}),
             "%.2f" % worst if worst is not None else "-"))
    if sync and bound:
        ok = moved and not early and worst <= bound
        line(ok, "sync: the jobs held at the kill by workers whose sessions died were claimed"
             " again within %.2f s of the promotion (bound %.1f s: %s), each after its"
             " session had expired%s"
             % (worst or -1, bound, fo.get("redelivery_bound_why", ""),
                "; claimed while the holder's session was live: %s" % early[:5] if early
                else "" if moved else "; none was"))
    if "waiting_at_kill" in fo:
        failover_waits(h, ck, line, fo)


def failover_waits(h, ck, line, fo):
    """The waiting calls in flight at the kill: cut off, then served on the
    new primary (the lease once the harness's lease ran out there, the
    jobs the harness enqueued there)."""
    kill, prom = fo["kill_us"], fo["promoted_us"]
    waits = [o for o in h["ops"] if o.get("wait")]
    for kind, what in (("acquire", "CALL distlock.acquire() behind the harness's lease"),
                       ("claim", "CALL distlock.claim_wait() on an empty queue")):
        mine = [o for o in waits if o["op"] == kind]
        cut = [o for o in mine if o["outcome"] != "ok" and o.get("t0") is not None
               and o["t0"] < kill]
        got = [o for o in mine if o["outcome"] == "ok" and o.get("r")
               and o["t0"] >= prom]
        g = got[0] if got else None
        if kind == "acquire":
            ok = bool(g) and fo.get("holder_token") is not None and g["r"] > fo["holder_token"]
            text = "got the lease there, token %s (the holder's %s)" % (
                g["r"] if g else None, fo.get("holder_token"))
        else:
            acked = {j for o in h["ops"] if o["outcome"] == "ok"
                     and o["c"] == (g or {}).get("c") for j in acked_jobs(o)}
            ok = bool(g) and len(g["r"]) == fo.get("wait_jobs_enqueued") and \
                set(g["r"]) <= acked
            text = "got the %d jobs enqueued there after the failover (%s), acknowledged %d" % (
                len(g["r"]) if g else 0, g["r"] if g else [], len(acked))
        own = sum(1 for o in h["ops"] if o["op"] == "wait" and o["c"] == (g or {}).get("c"))
        line(ok and bool(cut) and fo["waiting_at_kill"] == 2,
             "waiting: a %s was waiting at the kill (%d of 2 calls in flight), lost its"
             " connection (%s), called again on the new primary and %s, %s s after the"
             " promotion; %d transactions of its own while it waited (heartbeats, reaps)"
             % (what, fo["waiting_at_kill"], cut[0].get("err") if cut else "not cut",
                text, "%.2f" % ((g["t1"] - prom) / 1e6) if g else "-", own))


def wal_complete(h):
    """Whether the history read from the slot is whole: every change
    followed the row's earlier version in the stream, every change had its
    commit, and the last version of every row is the row's final state in
    the table (so no committed change was lost to a crash or missed)."""
    dec, meta = h["decoding"], h["meta"]
    last = dec["last"]
    notes = []
    if dec.get("unseen"):
        notes.append("%d changes to rows the stream had not shown before" % dec["unseen"])
    if dec.get("uncommitted"):
        notes.append("%d changes without a commit record" % dec["uncommitted"])
    if dec.get("xid_mismatch"):
        notes.append("%d changes under another transaction id than their commit's"
                      % dec["xid_mismatch"])
    if meta.get("xid_epoch"):
        notes.append("transaction id epoch %s: the WAL's 32-bit ids do not match the"
                     " clients' xid8" % meta["xid_epoch"])
    rows = collections.Counter()
    checks = [
        ("jobs", "id", h["jobs"], [("status", "status"), ("attempts", "attempts"),
                                   ("session_id", "sid")]),
        ("locks", "name", h["locks"], [("owner", "owner"), ("session_id", "session"),
                                       ("token", "token"), ("expires_at", "expires")]),
        ("sessions", "id", h["sessions"], [("owner", "owner"), ("expires_at", "expires")]),
    ]
    for tbl, key, final, cols in checks:
        wal = {k: r for (t, k), r in last.items() if t == tbl}
        table = {r[key]: r for r in final}
        rows[tbl] = len(table)
        for k in sorted(set(wal) | set(table), key=str):
            w, t = wal.get(k), table.get(k)
            if w is None or t is None:
                notes.append("%s %r is %s" % (tbl, k, "in the table but not in the WAL"
                                             if w is None else "in the WAL but not in the table"))
                continue
            diff = ["%s %r (WAL) vs %r (table)" % (c, w.get(c), t.get(f_))
                    for c, f_ in cols if w.get(c) != t.get(f_)]
            if diff:
                notes.append("%s %r: %s" % (tbl, k, "; ".join(diff)))
    text = ("the history read from the WAL is complete: %d changes of distlock's rows in"
            " %d transactions, each after its row's earlier version; the last version of"
            " every row is the row's"
            " final state (%d jobs, %d locks, %d sessions); read in %.1f s"
            % (dec.get("changes", 0), dec.get("commits", 0), rows["jobs"], rows["locks"],
               rows["sessions"], meta.get("wal_read_s") or 0))
    if notes:
        text += " -- %d problems" % len(notes)
    return not notes, text, notes


# The statements of the queue's SQL path (src/queue.c) as pg_stat_statements
# keeps them: constants become $n (after the statement's own parameters), so
# the patterns take any number there, and runs of white space are read as one
# space.  The SQL-path run checks that these patterns do match.
SQL_PATH = [
    ("claim_stmt", re.compile(
        r"^WITH claimed AS \( ?UPDATE distlock\.jobs SET status = \$\d+(::[\w.]+)?,"
        r" session_id = \$2, claimed_at = \$3, .*FOR UPDATE SKIP LOCKED")),
    ("claim_one_stmt", re.compile(
        r"^UPDATE distlock\.jobs SET status = \$\d+(::[\w.]+)?,"
        r" session_id = \$2, claimed_at = \$3, .*FOR UPDATE SKIP LOCKED")),
    ("complete_held_stmt", re.compile(
        r"^UPDATE distlock\.jobs SET status = \$\d+(::[\w.]+)?, finished_at = \$3,"
        r" result = \$4 WHERE id = \$1 ")),
    ("complete_batch_held_stmt", re.compile(
        r"^WITH done AS \( ?UPDATE distlock\.jobs SET status = \$\d+(::[\w.]+)?,"
        r" finished_at = \$3, result = \$4 WHERE id = ANY \(\$1\) ")),
    # with distlock.delete_completed
    ("complete_delete_stmt", re.compile(
        r"^DELETE FROM distlock\.jobs WHERE id = \$1 AND status IS NOT DISTINCT FROM")),
    ("complete_batch_delete_stmt", re.compile(
        r"^WITH done AS \( ?DELETE FROM distlock\.jobs WHERE id = ANY \(\$1\) ")),
]


def sql_path_statement(text):
    text = " ".join(text.split())
    for name, rx in SQL_PATH:
        if rx.search(text):
            return name
    return None


def pgss_calls(h):
    """Calls per statement of distlock's nested statements over the run.
    A crash (or a restart) may start the counters again, under a new
    stats_reset: the counts of each counter lifetime (the largest sample
    in it) are added up.  Returns (calls per statement name or query id,
    samples, lifetimes, entries evicted)."""
    texts = dict(h["meta"].get("pgss_queries") or {})
    lives = collections.OrderedDict()
    samples = dealloc = 0
    for r in h["pgss"]:
        if r.get("k") == "text":
            texts[r["q"]] = r["text"]
        elif r.get("k") == "sample":
            samples += 1
            life = lives.setdefault(r.get("reset"), {})
            for q, n in r["calls"].items():
                life[q] = max(life.get(q, 0), n)
            dealloc = max(dealloc, r.get("dealloc") or 0)
    calls = collections.Counter()
    for life in lives.values():
        for q, n in life.items():
            calls[sql_path_statement(texts.get(q, "")) or "other"] += n
    return calls, samples, len(lives), dealloc


def which_path(h, ck):
    """Whether the calls took the path the run is for: with
    distlock.direct_path on (the default), claims and acknowledgements work
    on the table directly and the SQL path's statements never run; with it
    off, they run.  Nothing on distlock's tables may divert them (a trigger
    other than distlock's own jobs_pending, a rule, forced row security),
    and pg_stat_statements must have counted
    distlock's other nested statements, or its zero would prove nothing."""
    meta, f = h["meta"], ck.fig
    want = meta.get("path", "direct")
    setting = (meta.get("settings") or {}).get("distlock.direct_path")
    calls, samples, lives, dealloc = pgss_calls(h)
    claim = calls["claim_stmt"] + calls["claim_one_stmt"]
    ack = calls["complete_held_stmt"] + calls["complete_batch_held_stmt"] + \
        calls["complete_delete_stmt"] + calls["complete_batch_delete_stmt"]
    bad = []
    if setting != ("on" if want == "direct" else "off"):
        bad.append("distlock.direct_path is %r" % setting)
    if meta.get("diverters"):
        bad.append("diverted by %s" % meta["diverters"])
    if not samples:
        bad.append("no pg_stat_statements sample")
    if dealloc:
        bad.append("pg_stat_statements evicted %d entries" % dealloc)
    if not calls["other"]:
        bad.append("pg_stat_statements counted none of distlock's nested statements")
    tail = ("; distlock's other statements inside its functions %d calls (pg_stat_statements,"
            " track = all: %d samples over %d counter lifetimes); no trigger but jobs_pending,"
            " no rule or forced row security on distlock's tables" % (calls["other"], samples, lives))
    if not ck.has_queue:
        return not bad, ("path: distlock.direct_path = %s; the lease functions have one"
                         " implementation%s%s" % (setting, tail,
                                                  " -- " + "; ".join(bad) if bad else ""))
    if not f.get("claims") or not f.get("completed"):
        bad.append("no claim or acknowledgement to judge")
    # the heartbeats' path: with shared memory (distlock preloaded, or the
    # DSM registry of 17 and later) they keep their promises there and
    # mostly write nothing; without, every one writes (reported only: a
    # failover loses committed writes, so the history can miss some)
    settings = meta.get("settings") or {}
    major = re.match(r"\d+", settings.get("server_version") or "0")
    preloaded = "distlock" in [x.strip() for x in
                               (settings.get("shared_preload_libraries") or "").split(",")] \
        or (major is not None and int(major.group(0)) >= 17)
    beats = [op for ops in ck.beats.values() for op in ops if ck.beat_committed(op)]
    wrote = sum(1 for op in beats if ck.beat_update(op))
    if not beats:
        bad.append("no heartbeat that answered true to judge")
    elif preloaded and wrote * 2 > len(beats):
        bad.append("with shared memory, %d of %d heartbeats wrote their row" % (wrote, len(beats)))
    tail += ("; heartbeats that answered true and committed %d, %d of them wrote the"
             " session's row (%s)" % (len(beats), wrote, "shared memory" if preloaded
                                       else "no shared memory"))
    # with distlock.delete_completed every acknowledgement deletes its job,
    # otherwise none does
    keep = settings.get("distlock.delete_completed") != "on"
    gone = f.get("deleted_by_ack", 0)
    if gone != (0 if keep else f.get("completed")):
        bad.append("%d of %d completions deleted their job, with distlock.delete_completed %s"
                   % (gone, f.get("completed"), settings.get("distlock.delete_completed")))
    tail += "; %d of the completions deleted their job (distlock.delete_completed %s)" % (
        gone, settings.get("distlock.delete_completed"))
    if want == "direct" and (claim or ack):
        bad.append("the SQL path ran")
    if want == "sql" and not (claim and ack):
        bad.append("the SQL path did not run")
    # every batch acknowledgement is one of these statements on the SQL
    # path: none counted means the pattern no longer matches the statement,
    # and the production path's zero would prove nothing for batches
    batch_stmt = "complete_batch_held_stmt" if keep else "complete_batch_delete_stmt"
    if want == "sql" and (f.get("batches") or {}).get("completions") \
            and not calls[batch_stmt]:
        bad.append("no batch acknowledgement statement was counted")
    head = ("production path: claims and acknowledgements worked on the table directly"
            if want == "direct" else
            "SQL path: claims and acknowledgements ran as SQL statements")
    return not bad, (
        "%s (distlock.direct_path = %s): %d claims and %d completions in the WAL;"
        " SQL claim statements %d calls (claim_stmt %d, claim_one_stmt %d), SQL"
        " acknowledgement statements %d calls (complete_held_stmt %d,"
        " complete_batch_held_stmt %d, complete_delete_stmt %d,"
        " complete_batch_delete_stmt %d)%s%s"
        % (head, setting, f["claims"], f["completed"], claim, calls["claim_stmt"],
           calls["claim_one_stmt"], ack, calls["complete_held_stmt"],
           calls["complete_batch_held_stmt"], calls["complete_delete_stmt"],
           calls["complete_batch_delete_stmt"], tail, " -- " + "; ".join(bad) if bad else ""))


def selftest_decoding(desc, h, expected):
    """The WAL text of a hand-written history must decode to the changes
    written out beside it ("decoded"), old rows rebuilt from the stream."""
    fields = ("id", "tbl", "op", "xid", "lsn", "at", "commit", "old", "new")
    got = [{k: a.get(k) for k in fields} for a in h["changes"]]
    want = [{k: a.get(k) for k in fields} for a in expected]
    good = got == want and not h["decoding"].get("unseen") \
        and not h["decoding"].get("uncommitted")
    print("%s - checker self-test: the WAL text of the %s decodes to its %d row changes,"
          " each with the row's earlier version%s"
          % ("ok" if good else "not ok", desc.split(" (")[0], len(want),
             "" if good else " (got %d)" % len(got)))
    if not good:
        for g, w in zip(got, want):
            if g != w:
                print("#   decoded %s" % json.dumps(g))
                print("#   written %s" % json.dumps(w))
                break
    return good


def selftest(d):
    ok = True
    files = sorted(glob.glob(os.path.join(d, "*.json")))
    for fn in files:
        h = load(fn)
        want = set(h["meta"].get("expect", []))
        ck = Check(h)
        got = {k for k, msgs in ck.run().items() if msgs}
        if "diverters" in h["meta"] and not which_path(h, ck)[0]:
            got.add("path")
        name = os.path.splitext(os.path.basename(fn))[0]
        desc = h["meta"].get("planted", "")
        good = got == want
        ok = ok and good
        if want:
            print("%s - checker self-test: %s flagged as %s%s" % (
                "ok" if good else "not ok", desc or name, "/".join(sorted(want)),
                "" if good else " (flagged: %s)" % (sorted(got) or "nothing")))
        else:
            print("%s - checker self-test: %s passes%s" % (
                "ok" if good else "not ok", desc or name,
                "" if good else " (flagged: %s)" % sorted(got)))
        if not good or os.environ.get("VERBOSE"):
            for k, msgs in ck.v.items():
                for m in msgs[:EXAMPLES]:
                    print("#   %s: %s" % (k, m))
        with open(fn) as f:
            expected = json.load(f).get("decoded")
        if expected is not None:
            ok = selftest_decoding(desc or name, h, expected) and ok
    if not files:
        print("not ok - checker self-test: no histories in %s" % d)
        ok = False
    return ok


def advisory(fn):
    with open(fn) as f:
        m = json.load(f)
    d, dl = m["demo"], m["demo_lease"]
    print("# advisory lock through PgBouncer (transaction mode): A locked on backend %d;"
          " B, in a transaction on backend %d, was granted the same lock: %s;"
          " A's pg_advisory_unlock ran on backend %d and returned %s;"
          " afterwards the lock was held by backend(s) %s"
          % (d["a_pid"], d["b_pid"], d["b_lock"], d["unlock_pid"], d["unlock"],
             d["still_held_by"]))
    print("# the same with a lease: A got token %s on backend %d, B got %s while A held it,"
          " A's release ran on backend %d and returned %s, B then got token %s"
          % (dl["a_token"], dl["a_pid"], dl["b_while_held"], dl["release_pid"],
             dl["a_release"], dl["b_after"]))
    for kind in ("advisory", "lease"):
        t = m[kind]
        print("# %s, 8 clients for 4 s through the pool: %d critical sections, %d overlapping"
              " another client's, %d unlocks/releases refused, %d errors, %d left held"
              % (kind, t["sections"], t["overlaps"], t["unlock_false"], t["errors"],
                 t["left_held"]))
    broke = (d["a_lock"] and d["b_lock"] and d["unlock"] is False
             and d["unlock_pid"] != d["a_pid"] and d["a_pid"] in d["still_held_by"])
    print("%s - pool: a session advisory lock does not survive transaction pooling (another"
          " client was granted it, its owner's unlock landed on another backend)"
          % ("ok" if broke else "not ok"))
    lease_ok = (dl["a_token"] is not None and dl["b_while_held"] is None and dl["a_release"]
                and dl["b_after"] is not None and m["lease"]["overlaps"] == 0
                and m["lease"]["unlock_false"] == 0 and m["lease"]["sections"] > 0)
    print("%s - pool: distlock leases hold through the same pool (%d critical sections,"
          " 0 overlapping, 0 releases refused)"
          % ("ok" if lease_ok else "not ok", m["lease"]["sections"]))
    return broke and lease_ok


def main():
    args = sys.argv[1:]
    # The verdicts are the "ok" / "not ok" lines; the exit status only says
    # whether the checker itself ran to the end.
    if args[:1] == ["--selftest"]:
        selftest(args[1])
    elif args[:1] == ["--advisory"]:
        advisory(args[1])
    else:
        report(args[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
