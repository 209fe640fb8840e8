/*-------------------------------------------------------------------------
 *
 * session.c
 *		Worker sessions: open, heartbeat, close, reap.
 *
 * A session is a row in distlock.sessions that is live while the server
 * clock is before its expiry: its expires_at, or with shared memory what
 * its heartbeats promised, kept there while the row is ahead of it
 * (beat.c; every judgement below reads the row, then the promise).  Each
 * heartbeat pushes the expiry to now + ttl; once it has passed,
 * heartbeat() refuses, so a session that has expired stays dead.  Its
 * session-bound locks are free and its
 * running jobs claimable from that moment, because every decision that
 * depends on a session reads its expires_at (see distlock.h); reap() only
 * deletes the row and hands the jobs back so that the tables stay small.
 *
 * Two heavyweight locks per session order the calls that depend on it.
 * Both are transaction-level advisory-lock tags (USER_LOCKMETHOD) carrying
 * 64 bits of a digest of the session id and, in the field core leaves to
 * extensions, a kind of distlock's own (SESSION_TAG_USE, SESSION_TAG_BEAT),
 * so that pg_locks shows them as advisory locks and monitoring queries over
 * it keep working.  Neither writes WAL or dirties a page.
 *
 *	- The use lock.  A call the session itself makes (claim, complete,
 *	  fail, an acquire bound to it) holds it in ShareLock until its
 *	  transaction ends; closing takes it in ExclusiveLock, so it waits for
 *	  every such call in flight, and reaping takes it only if it can at
 *	  once, so it skips sessions in use.  So a job being completed is never
 *	  handed back, and no job is claimed for a session being closed.  A
 *	  call looks at the committed row, and checks that the caller may act
 *	  for the session, before it waits for this lock: a role cannot queue on
 *	  another role's session.
 *	- The beat lock.  heartbeat() holds it in ExclusiveLock, taken before
 *	  it reads the clock, until its transaction ends.  Whoever finds a
 *	  session expired on its committed row takes it in ShareLock without
 *	  waiting, reads the row again and lets it go at once: if it is granted,
 *	  no heartbeat is in flight, so "expired" is final (a heartbeat that
 *	  starts later reads a later clock and refuses); if not, a heartbeat may
 *	  be about to extend the session, and the caller takes the answer that
 *	  is safe for it (session_judge()).  A judgement thus never keeps
 *	  anything locked against heartbeats, and never waits for one.
 *
 * The rows themselves are read as last committed, without a row lock, at
 * READ COMMITTED: "live" read that way is true (the expiry only moves
 * forward while the row exists, and a row is deleted only once it has
 * expired, or by a close that the use lock orders against), and "missing"
 * is true.  At REPEATABLE READ and SERIALIZABLE a session acting for itself
 * also locks its row FOR KEY SHARE, which fails with 40001 if the row was
 * closed or reaped since the transaction's snapshot; FOR KEY SHARE does not
 * conflict with a heartbeat's FOR NO KEY UPDATE.  The session is still
 * judged on its row as last committed: the version that lock takes is
 * the snapshot's, older than the heartbeats made since.
 *
 * Reaping never waits: it skips a session in use, a session whose row
 * somebody holds, and a session one of whose running jobs somebody holds
 * (an open cancel(), say), leaving it for a later reap.  A call never reaps
 * a session this transaction acts for, so no job is ever left running for
 * a session that no longer exists.
 *
 * Only a role that may act for the session's creator (access.c) may use,
 * heartbeat, close or reap it (session_reaper() says why reaping too);
 * anyone may judge whether it is live.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/session.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/itemptr.h"
#include "storage/lock.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/fmgrprotos.h"
#include "utils/lsyscache.h"
#include "utils/uuid.h"

#include "compat.h"
#include "distlock.h"

/* see dl_reap_expired(), session_make_room() and dl_reap_some() */
#define REAP_VAIN_BACKOFF	USECS_PER_SEC
#define REAP_SOME_WALK		10

PG_FUNCTION_INFO_V1(distlock_session_open);
PG_FUNCTION_INFO_V1(distlock_heartbeat);
PG_FUNCTION_INFO_V1(distlock_session_close);
PG_FUNCTION_INFO_V1(distlock_reap);

static DistlockStmt insert_stmt = {
	"INSERT INTO distlock.sessions"
	" (id, owner, info, ttl, created_at, heartbeat_at, expires_at, created_by)"
	" VALUES ($1, $2, $3, $4, $5, $5, $6, $7)",
	7, {UUIDOID, TEXTOID, JSONBOID, INTERVALOID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, REGROLEOID}
};

/* Columns of the statements that lock a session row. */
#define SESSION_COL_EXPIRES		1
#define SESSION_COL_CREATOR		2
#define SESSION_COL_TTL			3

static DistlockStmt lock_key_share_stmt = {
	"SELECT FROM distlock.sessions WHERE id = $1 FOR KEY SHARE",
	1, {UUIDOID}
};

static DistlockStmt lock_heartbeat_stmt = {
	"SELECT expires_at, created_by, ttl FROM distlock.sessions WHERE id = $1"
	" FOR NO KEY UPDATE",
	1, {UUIDOID}
};

/* The same, skipping a row somebody holds. */
static DistlockStmt lock_heartbeat_skip_stmt = {
	"SELECT expires_at, created_by, ttl FROM distlock.sessions WHERE id = $1"
	" FOR NO KEY UPDATE SKIP LOCKED",
	1, {UUIDOID}
};

static DistlockStmt heartbeat_stmt = {
	"UPDATE distlock.sessions SET heartbeat_at = $2, expires_at = $3"
	" WHERE id = $1",
	3, {UUIDOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

static DistlockStmt lock_close_stmt = {
	"SELECT expires_at, created_by FROM distlock.sessions WHERE id = $1"
	" FOR UPDATE",
	1, {UUIDOID}
};

/*
 * A running job of an ended session goes back to pending, due at once, or
 * becomes failed when it has used all its attempts.  A close waits for the
 * job rows somebody holds.
 */
#define RELEASE_JOBS_SET \
	"UPDATE distlock.jobs SET" \
	" status = CASE WHEN attempts >= max_attempts" \
	"  THEN 'failed' ELSE 'pending' END::distlock.job_status," \
	" session_id = CASE WHEN attempts >= max_attempts THEN session_id END," \
	" finished_at = CASE WHEN attempts >= max_attempts THEN $2 END," \
	" last_error = $3"

static DistlockStmt release_jobs_stmt = {
	RELEASE_JOBS_SET " WHERE session_id = $1 AND status = 'running'"
	" RETURNING " DL_JOBS_BACK_RETURNING,
	3, {UUIDOID, TIMESTAMPTZOID, TEXTOID}
};

/* The same for a reap, which skips the job rows somebody holds. */
static DistlockStmt release_free_jobs_stmt = {
	RELEASE_JOBS_SET " WHERE id = ANY (ARRAY("
	"  SELECT id FROM distlock.jobs"
	"  WHERE session_id = $1 AND status = 'running'"
	"  FOR UPDATE SKIP LOCKED))"
	" RETURNING " DL_JOBS_BACK_RETURNING,
	3, {UUIDOID, TIMESTAMPTZOID, TEXTOID}
};

static DistlockStmt delete_stmt = {
	"DELETE FROM distlock.sessions WHERE id = $1",
	1, {UUIDOID}
};

/*
 * Sessions expired at $1, in order of expiry from ($3, $4) on, that role
 * $5 may reap (0: every one; see session_reaper()): the candidates for
 * reaping, read without locking them (session_lock_version() locks each
 * one).
 */
static DistlockStmt find_expired_stmt = {
	"SELECT id, expires_at, ctid FROM distlock.sessions s"
	" WHERE expires_at <= $1 AND (expires_at, id) > ($3, $4)"
	" AND ($5::oid = 0 OR pg_has_role($5::oid, created_by, 'USAGE')"
	"  OR (EXISTS (SELECT FROM distlock.jobs j"
	"    WHERE j.session_id = s.id AND j.status = 'running')"
	"   AND NOT EXISTS (SELECT FROM distlock.jobs j"
	"    WHERE j.session_id = s.id AND j.status = 'running'"
	"    AND NOT " DL_QUEUE_TAKES("$5", "j") ")))"
	" ORDER BY expires_at, id LIMIT $2",
	5, {TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, UUIDOID, REGROLEOID}
};

/*
 * Sessions role $1 opened whose rows say they expired at $2, in order of
 * expiry from ($4, $5) on, up to $3 (sessions_created_by_idx, whose key
 * ends in these columns, gives them in that order).
 */
static DistlockStmt own_expired_stmt = {
	"SELECT id, expires_at, ctid FROM distlock.sessions"
	" WHERE created_by = $1 AND expires_at <= $2"
	" AND (expires_at, id) > ($4, $5)"
	" ORDER BY expires_at, id LIMIT $3",
	5, {REGROLEOID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, UUIDOID}
};

/*
 * If role $1 opened a session whose row says it expired at $2: how many
 * of its sessions' rows say live, up to $3; else NULL, counting nothing
 * (the subquery in THEN is an initplan, run only when asked for).
 */
static DistlockStmt own_live_stmt = {
	"SELECT CASE WHEN EXISTS (SELECT FROM distlock.sessions"
	"  WHERE created_by = $1 AND expires_at <= $2)"
	" THEN (SELECT count(*) FROM (SELECT FROM distlock.sessions"
	"  WHERE created_by = $1 AND expires_at > $2 LIMIT $3) r) END",
	3, {REGROLEOID, TIMESTAMPTZOID, INT4OID}
};

/* What a session row, once locked, says about the session. */
typedef enum SessionState
{
	SESSION_MISSING,			/* closed, reaped or never opened */
	SESSION_EXPIRED,
	SESSION_LIVE,
	SESSION_BUSY				/* expired as committed, heartbeat in flight */
} SessionState;

/*
 * Read session_id's row as committed now (or as of the snapshot of read
 * as_of), and as this transaction has changed it so far: its expiry (if
 * expires is given: the heartbeats' promise, beat.c, from the row's
 * expires_at) and created_by; and, if asked, the row's expires_at itself
 * and the session's ttl.  Returns false if there is none.  If
 * others_expired is given, it is set to whether any session had expired
 * when the row was read (for claim's reaping).  A plain read, without a
 * row lock: the header comment says when that can be trusted.
 */
static bool
session_read_row(const LatestRead *as_of, Datum session_id,
				 TimestampTz *expires, Oid *creator, bool *others_expired,
				 TimestampTz *row_expires, Interval **ttl)
{
	const DistlockCatalog *cat = dl_catalog();
	LatestRead	lr;
	bool		found;

	if (as_of)
		dl_latest_open_as(&lr, cat->sessions, AccessShareLock, as_of);
	else
		dl_latest_open(&lr, cat->sessions, AccessShareLock);
	dl_latest_scan(&lr, cat->sessions_pkey, BTEqualStrategyNumber, F_UUID_EQ,
				   session_id);
	found = dl_latest_next(&lr);
	if (found)
	{
		bool		isnull;
		TimestampTz row = DatumGetTimestampTz(slot_getattr(lr.slot,
														   cat->session_expires_at,
														   &isnull));

		if (row_expires)
			*row_expires = row;
		if (expires)
			*expires = dl_beat_effective(session_id, row);
		if (ttl)
			*ttl = DatumGetIntervalP(datumCopy(slot_getattr(lr.slot,
															cat->session_ttl,
															&isnull),
											   false, sizeof(Interval)));
		*creator = DatumGetObjectId(slot_getattr(lr.slot,
												 cat->session_created_by,
												 &isnull));
	}

	/*
	 * The first entry of sessions_expires_at_idx, if it is due, or a
	 * promise in shared memory that has passed.
	 */
	if (found && others_expired)
	{
		TimestampTz now = GetCurrentTimestamp();

		dl_latest_scan(&lr, cat->sessions_expires_at_idx,
					   BTLessEqualStrategyNumber, F_TIMESTAMPTZ_LE,
					   TimestampTzGetDatum(now));
		*others_expired = dl_latest_next(&lr) || dl_beat_due(now);
	}
	dl_latest_close(&lr);
	return found;
}

static bool
session_read(Datum session_id, TimestampTz *expires, Oid *creator,
			 bool *others_expired)
{
	return session_read_row(NULL, session_id, expires, creator,
							others_expired, NULL, NULL);
}

/* Kinds of session lock tag (field4 of an advisory tag; core uses 1, 2). */
#define SESSION_TAG_USE		DISTLOCK_TAG_USE
#define SESSION_TAG_BEAT	DISTLOCK_TAG_BEAT

static void session_check_access(DistlockCall *call, Oid creator,
								 Datum session_id);

/*
 * The state of a session whose row, read or locked just now, says creator
 * and gives expires (its expiry: dl_beat_effective() of its expires_at).
 * With a call, the caller must be allowed to act on the session (42501
 * otherwise).  The clock is read only now, after the row.
 */
static SessionState
session_judge(DistlockCall *call, Datum session_id, TimestampTz expires,
			  Oid creator)
{
	if (call)
		session_check_access(call, creator, session_id);
	return expires > GetCurrentTimestamp() ? SESSION_LIVE : SESSION_EXPIRED;
}

/*
 * Lock session_id's row with stmt and tell what state it is in now.  With a
 * call, the caller must be allowed to act on the session (42501 otherwise):
 * the session acts for itself.  Without, somebody is only judging whether
 * it is live.
 */
static SessionState
session_lock_state(DistlockStmt *stmt, Datum session_id, DistlockCall *call)
{
	Datum		values[1] = {session_id};
	bool		isnull;
	TimestampTz expires;

	if (dl_exec(stmt, values, NULL, 1) == 0)
		return SESSION_MISSING;
	expires = DatumGetTimestampTz(dl_getattr(0, SESSION_COL_EXPIRES, &isnull));
	return session_judge(call, session_id,
						 dl_beat_effective(session_id, expires),
						 DatumGetObjectId(dl_getattr(0, SESSION_COL_CREATOR,
													 &isnull)));
}

/*
 * Raise 42501 unless the caller may act on session_id, which role creator
 * opened.
 */
static void
session_check_access(DistlockCall *call, Oid creator, Datum session_id)
{
	if (!dl_may_act_for(call, creator))
		dl_check_access(call, creator, DL_OBJECT_SESSION,
						DatumGetCString(DirectFunctionCall1(uuid_out,
															session_id)));
}

/*
 * The lock tag of kind on session_id, in this database: 64 bits of the
 * SHA-256 digest of the id, so that pg_locks, which every role may read,
 * tells nobody a session's id, and nobody can make up an id whose tag is
 * another session's.  The last id's digest is kept: a call takes and
 * tests the same session's locks several times.
 */
static void
session_tag(LOCKTAG *tag, Datum session_id, uint16 kind)
{
	static pg_uuid_t last_id;
	static uint64 last_key;
	static bool last_valid = false;
	const pg_uuid_t *id = DatumGetUUIDP(session_id);

	if (!last_valid || memcmp(id->data, last_id.data, UUID_LEN) != 0)
	{
		last_key = dl_sha256_key(id->data, UUID_LEN);
		last_id = *id;
		last_valid = true;
	}
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (last_key >> 32),
						 (uint32) last_key, kind);
}

/*
 * Take session_id's lock of kind in mode, until the transaction ends or
 * session_unlock().  With dont_wait, return false at once if another
 * transaction holds a conflicting mode.  Two sessions whose ids' digests
 * share 64 bits would only wait for each other a little more than needed.
 */
static bool
session_lock(Datum session_id, uint16 kind, LOCKMODE mode, bool dont_wait)
{
	LOCKTAG		tag;

	session_tag(&tag, session_id, kind);
	return LockAcquire(&tag, mode, false, dont_wait) != LOCKACQUIRE_NOT_AVAIL;
}

static void
session_unlock(Datum session_id, uint16 kind, LOCKMODE mode)
{
	LOCKTAG		tag;

	session_tag(&tag, session_id, kind);
	LockRelease(&tag, mode, false);
}

/* Whether this transaction acts through session_id (holds its use lock). */
static bool
session_used_by_me(Datum session_id)
{
	LOCKTAG		tag;

	session_tag(&tag, session_id, SESSION_TAG_USE);
	return dl_lock_held_by_me(&tag, ShareLock);
}

/*
 * The state of session_id as last committed, judged on the clock read after
 * it, for a caller that holds no lock on its row.  "Expired" is confirmed
 * under the beat lock (see the header comment); SESSION_BUSY if a heartbeat
 * in flight holds it.  Never waits, and keeps no lock.  *creator and
 * *expires, if given, are set to what the judgement read when the session
 * exists.
 */
static SessionState
session_state_now(Datum session_id, Oid *creator, TimestampTz *expires)
{
	TimestampTz until;
	Oid			role;
	SessionState state;

	if (!session_read(session_id, &until, &role, NULL))
		return SESSION_MISSING;
	if (creator)
		*creator = role;
	if (expires)
		*expires = until;
	if (until > GetCurrentTimestamp())
		return SESSION_LIVE;
	if (!session_lock(session_id, SESSION_TAG_BEAT, ShareLock, true))
		return SESSION_BUSY;
	if (!session_read(session_id, &until, &role, NULL))
		state = SESSION_MISSING;
	else if (until > GetCurrentTimestamp())
		state = SESSION_LIVE;
	else
		state = SESSION_EXPIRED;
	if (expires)
		*expires = until;
	session_unlock(session_id, SESSION_TAG_BEAT, ShareLock);
	return state;
}

/*
 * The state of session_id, through which the caller acts, with the
 * session's use lock held in ShareLock for the rest of the transaction, so
 * that it is neither closed nor reaped before the call's work commits.  A
 * session of a role the caller may not act for raises 42501, before any
 * lock is waited for; a session that does not exist leaves no lock behind.
 * *expires is set to the expiry the judgement saw (for a live session).
 * *others_expired, if given, says whether some session had expired (for
 * claim's reaping); it is always false at REPEATABLE READ and SERIALIZABLE.
 *
 * At READ COMMITTED the row is read as last committed after the use lock
 * is granted: a close or reap that finished before that committed before
 * the read (a transaction releases its locks after it commits).  "Live"
 * and "missing" are final (see the header comment); "expired" is confirmed
 * under the beat lock, and a heartbeat in flight makes it an expiry too:
 * refusing is safe, and the heartbeat's caller finds out whether it won.
 */
static SessionState
session_acting_state(DistlockCall *call, Datum session_id,
					 TimestampTz *expires, bool *others_expired)
{
	SessionState state;
	Oid			creator;
	bool		found;

	if (!session_lock(session_id, SESSION_TAG_USE, ShareLock, true))
	{
		/* a close is in flight: wait for it only if the session is ours */
		if (!session_read(session_id, expires, &creator, NULL))
			return SESSION_MISSING;
		session_check_access(call, creator, session_id);
		session_lock(session_id, SESSION_TAG_USE, ShareLock, false);
	}
	/*
	 * No inline reaping at REPEATABLE READ and SERIALIZABLE: the
	 * transaction's snapshot shows sessions as they were, and locking rows
	 * changed since would fail the caller's call with 40001.
	 */
	if (others_expired)
		*others_expired = false;

	if (IsolationUsesXactSnapshot())
	{
		Datum		values[1] = {session_id};

		/*
		 * The row lock only tells whether the row is still there: the
		 * version it locks is the snapshot's, whose expires_at heartbeats
		 * from other connections may have moved on since.  The session is
		 * judged on the row as last committed, as at READ COMMITTED.
		 */
		found = dl_exec(&lock_key_share_stmt, values, NULL, 1) > 0 &&
			session_read(session_id, expires, &creator, NULL);
	}
	else
		found = session_read(session_id, expires, &creator, others_expired);

	if (!found)
		state = SESSION_MISSING;
	else
	{
		state = session_judge(call, session_id, *expires, creator);
		if (state == SESSION_EXPIRED)
		{
			state = session_state_now(session_id, NULL, expires);
			if (state == SESSION_BUSY)
				state = SESSION_EXPIRED;
		}
	}

	/* nothing to use: hold nothing */
	if (state == SESSION_MISSING)
		session_unlock(session_id, SESSION_TAG_USE, ShareLock);
	return state;
}

/*
 * Whether session_id, which somebody else holds a lease through, is live
 * now.  Never waits and keeps nothing locked: a heartbeat in flight on a
 * session that has expired as committed counts as live if busy_is_live
 * (a contender must not take the lease then) and as dead otherwise (the
 * holder's own renew, release and fence must not rely on it).
 */
bool
dl_session_is_live(Datum session_id, bool busy_is_live)
{
	switch (session_state_now(session_id, NULL, NULL))
	{
		case SESSION_LIVE:
			return true;
		case SESSION_BUSY:
			return busy_is_live;
		default:
			return false;
	}
}

/*
 * The expiry of session_id (what its heartbeats promised: beat.c) as of
 * the snapshot of read as_of, without a row lock; false if it has no row.
 * For a lease judged on the lock row as_of read (lease.c).
 */
bool
dl_session_expiry(Datum session_id, const LatestRead *as_of,
				  TimestampTz *expires)
{
	Oid			creator;

	return session_read_row(as_of, session_id, expires, &creator, NULL, NULL,
							NULL);
}

/*
 * Whether session_id, through which the caller acts, is live; it is not
 * reaped or closed under the call (session_acting_state()).  A session of a
 * role the caller may not act for raises 42501.
 */
bool
dl_session_acting(DistlockCall *call, Datum session_id)
{
	TimestampTz expires;

	return session_acting_state(call, session_id, &expires, NULL) ==
		SESSION_LIVE;
}

/*
 * The calling worker acts through session_id: raise 42704 if it does not
 * exist, 42501 if it is another role's, and 55000 if it has expired.  The
 * session is not reaped or closed under the call (session_acting_state()).
 * *expires is set to the session's expiry as judged.  Returns whether some
 * session may have expired (so that a claim should reap), as seen by the
 * same read; always false at REPEATABLE READ and SERIALIZABLE.
 */
bool
dl_session_use(DistlockCall *call, Datum session_id, TimestampTz *expires)
{
	bool		others_expired;

	switch (session_acting_state(call, session_id, expires, &others_expired))
	{
		case SESSION_LIVE:
			return others_expired;
		case SESSION_MISSING:
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("session \"%s\" does not exist",
							DatumGetCString(DirectFunctionCall1(uuid_out,
																session_id))),
					 errhint("A session ceases to exist when it is closed or reaped.")));
			break;
		default:
			dl_session_expired_error(session_id);
	}
	pg_unreachable();
}

/*
 * Whether session_id, through which the caller acts (holding its use lock),
 * is still live now, judged again on its committed row; if so, *expires is
 * set to its expiry as committed.  A heartbeat in flight counts as an
 * expiry, as for every call of the session itself.
 */
bool
dl_session_still_live(Datum session_id, TimestampTz *expires)
{
	return session_state_now(session_id, NULL, expires) == SESSION_LIVE;
}

/* Raise 55000: session_id, through which the caller acts, has expired. */
void
dl_session_expired_error(Datum session_id)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("session \"%s\" has expired",
					DatumGetCString(DirectFunctionCall1(uuid_out, session_id))),
			 errhint("Open a new session, and heartbeat more often than its ttl.")));
}

/*
 * Whether session_id has a running job, as committed now (and as this
 * transaction has changed it): a read of jobs_running_session_idx under the
 * latest snapshot, which at REPEATABLE READ and SERIALIZABLE also sees jobs
 * claimed after the transaction's snapshot was taken.
 */
static bool
session_running_left(Datum session_id)
{
	const DistlockCatalog *cat = dl_catalog();
	LatestRead	lr;
	bool		found = false;

	dl_latest_open(&lr, cat->jobs, AccessShareLock);
	dl_latest_scan(&lr, cat->jobs_running_session_idx, BTEqualStrategyNumber,
				   F_UUID_EQ, session_id);
	if (!lr.index->rd_index->indisvalid &&
		RelationGetRelid(lr.index) != dl_catalog()->jobs_running_session_idx)
	{
		/*
		 * Locking the index processed the commit of a REINDEX ...
		 * CONCURRENTLY that gave its name to a new index: the old one, still
		 * kept up to date while we hold the table, is no longer valid, and
		 * the name (looked up again above) leads to the new one.
		 */
		dl_latest_scan(&lr, cat->jobs_running_session_idx,
					   BTEqualStrategyNumber, F_UUID_EQ, session_id);
	}
	if (!lr.index->rd_index->indisvalid || !lr.index->rd_index->indisready)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("index \"distlock.jobs_running_session_idx\" is not valid"),
				 errhint("REINDEX INDEX distlock.jobs_running_session_idx.")));
	while (!found && dl_latest_next(&lr))
	{
		bool		isnull;

		/* the index's predicate says running; check, should it be altered */
		found = DatumGetObjectId(slot_getattr(lr.slot, cat->job_status,
											  &isnull)) ==
			cat->status_running;
	}
	dl_latest_close(&lr);
	return found;
}

/* How session_end() ends a session. */
typedef enum SessionEnd
{
	SESSION_END_CLOSE,			/* session_close(): waits for held jobs */
	SESSION_END_DROP,			/* drop_owned(): all its jobs locked already */
	SESSION_END_REAP			/* a reap: hands back what it can */
} SessionEnd;

/*
 * Hand back session_id's running jobs and delete it; its row is locked.  A
 * close waits for job rows somebody holds; a reap skips them and then
 * keeps the session, expired, for a later reap; a drop has locked them
 * all.  Either way the session is deleted only if none of its jobs is
 * running as committed now: at REPEATABLE READ and SERIALIZABLE the
 * statements see the transaction's snapshot, and a job claimed for the
 * session since then (before the use lock was ours) would be left without
 * its session.  A close and a drop then fail with 40001, which undoes the
 * jobs handed back (the session may be live, and its worker still running
 * them), and a reap keeps the session, dead anyway.  Returns whether it
 * was deleted.
 */
static bool
session_end(Datum session_id, TimestampTz now, const char *why,
			SessionEnd how)
{
	Datum		values[3];

	values[0] = session_id;
	values[1] = TimestampTzGetDatum(now);
	values[2] = CStringGetTextDatum(why);
	dl_exec(how == SESSION_END_CLOSE ? &release_jobs_stmt :
			&release_free_jobs_stmt, values, NULL, 0);
	dl_wake_for_jobs_back();
	/* a reap ends many sessions in one call: keep no result per session */
	SPI_freetuptable(SPI_tuptable);
	if (session_running_left(session_id))
	{
		if (how != SESSION_END_REAP)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to a concurrent claim"),
					 errdetail("A job was claimed for the session after this transaction's snapshot was taken.")));
		return false;
	}
	dl_exec(&delete_stmt, values, NULL, 0);
	dl_beat_gone(session_id);
	/* its leases are free: their first waiters may take them */
	dl_wake_at_commit(DL_WAIT_SESSION, InvalidOid, session_id, 1);
	return true;
}

/*
 * Lock the version of session id's row at tid FOR UPDATE for reaping,
 * unless it is no longer the latest committed version (a heartbeat
 * extended the session, somebody deleted it) or somebody else holds it (a
 * heartbeat, another reaper, a close): then return false at once, leaving
 * nothing locked.  The version was read expired at now, and nothing
 * revives an expired session, so a locked one is expired for good.  (FOR
 * UPDATE SKIP LOCKED would follow an extended row to its latest version,
 * find it no longer expired, and keep it locked until our transaction
 * ends, holding up its heartbeats.)
 *
 * The tid came from a statement whose buffer pins are gone, so the page
 * may have been pruned since: the version is first fetched under the
 * latest snapshot, which checks that the line pointer still holds a
 * visible tuple, and that tuple must be the same session, still expired;
 * the fetch keeps the page pinned while the lock is taken.
 */
static bool
session_lock_version(ItemPointer tid, Datum id, TimestampTz now)
{
	const DistlockCatalog *cat = dl_catalog();
	LatestRead	lr;
	bool		ok = false;

	dl_latest_open(&lr, cat->sessions, RowShareLock);
	if (table_tuple_fetch_row_version(lr.rel, tid, lr.snapshot, lr.slot))
	{
		bool		isnull;
		Datum		read_id = slot_getattr(lr.slot, cat->session_id, &isnull);
		Datum		expires = slot_getattr(lr.slot, cat->session_expires_at,
										   &isnull);
		TupleTableSlot *locked = table_slot_create(lr.rel, NULL);
		TM_FailureData tmfd;

		ok = memcmp(DatumGetUUIDP(read_id), DatumGetUUIDP(id),
					UUID_LEN) == 0 &&
			dl_beat_effective(id, DatumGetTimestampTz(expires)) <= now &&
			table_tuple_lock(lr.rel, tid, lr.snapshot, locked,
							 GetCurrentCommandId(true), LockTupleExclusive,
							 LockWaitSkip, 0, &tmfd) == TM_Ok;
		ExecDropSingleTupleTableSlot(locked);
	}
	dl_latest_close(&lr);
	return ok;
}

/*
 * Where a walk through the expired sessions has got to: the expires_at and
 * id of the last candidate looked at.
 */
typedef struct ReapCursor
{
	TimestampTz expires_at;
	pg_uuid_t	id;
} ReapCursor;

/*
 * A per-connection pause after a walk that reaped nothing for a role:
 * until "until", that role's next walk of the same kind is skipped.  (A
 * clock set back ends the pause.)
 */
typedef struct ReapBackoff
{
	Oid			caller;
	TimestampTz until;
} ReapBackoff;

static bool
reap_backing_off(const ReapBackoff *b, Oid caller, TimestampTz now)
{
	return caller == b->caller && now < b->until &&
		b->until - now <= REAP_VAIN_BACKOFF;
}

/* Pause caller's walks from now (InvalidOid: pause nobody's). */
static void
reap_back_off(ReapBackoff *b, Oid caller, TimestampTz now)
{
	b->caller = caller;
	b->until = now + REAP_VAIN_BACKOFF;
}

/*
 * Reap session id, whose row version at tid was found expired at now,
 * unless a call is using it (this transaction's own among them) or its
 * row is held: see session_reap_batch().  Returns whether it was reaped.
 */
static bool
session_reap_one(Datum id, ItemPointer tid, TimestampTz now)
{
	bool		locked;

	if (session_used_by_me(id) ||
		!session_lock(id, SESSION_TAG_USE, ExclusiveLock, true))
		return false;			/* in use: a later reap takes it */
	locked = session_lock_version(tid, id, now);
	session_unlock(id, SESSION_TAG_USE, ExclusiveLock);
	return locked && session_end(id, now, "session expired", SESSION_END_REAP);
}

/*
 * Reap the n sessions an expired-sessions statement just found (id,
 * expires_at, ctid), moving *from past them, as
 * session_reap_batch() below says; returns how many were reaped.
 */
static int
session_reap_found(int n, TimestampTz now, ReapCursor *from)
{
	int			reaped = 0;
	pg_uuid_t  *ids;
	ItemPointerData *tids;

	if (n == 0)
		return 0;

	/* the loop below runs statements of its own: copy the ids out first */
	ids = palloc(n * sizeof(pg_uuid_t));
	tids = palloc(n * sizeof(ItemPointerData));
	for (int i = 0; i < n; i++)
	{
		bool		isnull;

		ids[i] = *DatumGetUUIDP(dl_getattr(i, 1, &isnull));
		tids[i] = *(ItemPointer) DatumGetPointer(dl_getattr(i, 3, &isnull));
		if (i == n - 1)
		{
			from->expires_at = DatumGetTimestampTz(dl_getattr(i, 2, &isnull));
			from->id = ids[i];
		}
	}
	SPI_freetuptable(SPI_tuptable);

	for (int i = 0; i < n; i++)
	{
		if (session_reap_one(UUIDPGetDatum(&ids[i]), &tids[i], now))
			reaped++;
	}
	pfree(ids);
	pfree(tids);
	return reaped;
}

/*
 * Reap the sessions among the next limit candidates after *from that
 * expired before now, that no call is using and whose roles' privileges
 * reaper has (InvalidOid: every role's); returns how many were reaped,
 * sets *examined to the number of candidates and moves *from past them.
 * Sessions this transaction acts through are never reaped: the use lock
 * cannot keep out its own holder.
 *
 * A candidate is reaped only if its use lock can be had at once (no call
 * of the session is in flight) and then the row version read
 * (session_lock_version()).  The use lock is let go again once the row is
 * locked: a call that takes it after that finds the session expired on
 * its committed row and refuses.
 */
static int
session_reap_batch(TimestampTz now, int limit, Oid reaper, ReapCursor *from,
				   int *examined)
{
	Datum		values[5];

	values[0] = TimestampTzGetDatum(now);
	values[1] = Int32GetDatum(limit);
	values[2] = TimestampTzGetDatum(from->expires_at);
	values[3] = UUIDPGetDatum(&from->id);
	values[4] = ObjectIdGetDatum(reaper);
	*examined = (int) dl_exec(&find_expired_stmt, values, NULL, 0);
	return session_reap_found(*examined, now, from);
}

/*
 * Reap up to limit of the sessions whose promise in shared memory (beat.c)
 * passed before now while their rows say later, which the walk through
 * sessions_expires_at_idx does not find, and whose roles' privileges
 * reaper has (InvalidOid: every role's); returns how many were reaped and
 * adds the number of candidates to *examined.
 */
static int
session_reap_promised(TimestampTz now, int limit, Oid reaper, int *examined)
{
	const DistlockCatalog *cat = dl_catalog();
	pg_uuid_t  *ids = palloc(limit * sizeof(pg_uuid_t));
	int			n = dl_beat_expired(now, ids, limit);
	int			reaped = 0;

	for (int i = 0; i < n; i++)
	{
		Datum		id = UUIDPGetDatum(&ids[i]);
		LatestRead	lr;
		ItemPointerData tid;
		bool		found;

		dl_latest_open(&lr, cat->sessions, AccessShareLock);
		dl_latest_scan(&lr, cat->sessions_pkey, BTEqualStrategyNumber,
					   F_UUID_EQ, id);
		found = dl_latest_next(&lr);
		if (found)
		{
			bool		isnull;
			Oid			creator = DatumGetObjectId(slot_getattr(lr.slot,
																cat->session_created_by,
																&isnull));

			tid = lr.slot->tts_tid;
			/* (not those whose jobs only are in the reaper's queues) */
			found = !OidIsValid(reaper) || has_privs_of_role(reaper, creator);
			*examined += found;
		}
		dl_latest_close(&lr);
		if (found && session_reap_one(id, &tid, now))
			reaped++;
	}
	pfree(ids);
	return reaped;
}

/*
 * Whose sessions the caller may reap: an administrator's reaps take every
 * one (InvalidOid); anyone else's those of the roles it may act for, and
 * those that have running jobs, all in queues it may claim from or manage.
 * (Another role's session without one is left to that role: reaped in an
 * open transaction, its row would still count against that role's limit,
 * with nothing that role could do about it.)
 *
 * A reap hands a dead session's running jobs back in the reaper's
 * transaction, which holds them until it ends: while it is open, no other
 * transaction sees them pending, and the next reap skips the session, as
 * its rows are held.  A role that reaped any role's sessions in an open
 * transaction (a reap(), or the claim of a worker that claims and works in
 * one transaction) would hold other roles' jobs for as long as it liked.
 * Reaping only these, it holds only jobs it could hold anyway: by closing
 * those sessions, or by claiming (or cancelling) the jobs once another
 * reap has handed them back.  So the workers of different roles that
 * claim from one queue still reap each other's dead sessions in passing.
 */
static Oid
session_reaper(DistlockCall *call)
{
	return dl_is_admin(call) ? InvalidOid : call->caller;
}

/*
 * Reap up to limit of the sessions that expired first before now and that
 * the caller may reap (session_reaper()), skipping those a call is using
 * (this transaction's own among them); returns how many were reaped.  For
 * a claim, which reaps in passing when some session has expired: one that
 * finds none it may reap leaves this backend's claims by the same role for
 * the next REAP_VAIN_BACKOFF without reaping, so that a session it may
 * not reap, which the background worker, an administrator or that
 * session's role's own claims have yet to reap, costs a walk per backoff,
 * not one per claim.
 */
int
dl_reap_expired(DistlockCall *call, TimestampTz now, int limit)
{
	static ReapBackoff backoff = {InvalidOid};
	ReapCursor	from = {DT_NOBEGIN};
	Oid			reaper = session_reaper(call);
	int			examined;
	int			reaped;

	if (reap_backing_off(&backoff, call->caller, now))
		return 0;
	/* one batch from the head, and as many whose promise passed */
	reaped = session_reap_batch(now, limit, reaper, &from, &examined);
	reaped += session_reap_promised(now, limit, reaper, &examined);
	reap_back_off(&backoff, examined == 0 ? call->caller : InvalidOid, now);
	return reaped;
}

/*
 * Reap up to limit of the sessions that expired first and that the caller
 * may reap, skipping those a call is using; returns how many
 * were reaped.  For maintain(), whose passes each do a bounded amount.
 * The walk goes on past sessions it cannot reap, up to REAP_SOME_WALK
 * times limit of them: sessions some role keeps in use, at the head of
 * the index, must not hold up the reaping of everyone else's.
 */
int
dl_reap_some(DistlockCall *call, int limit)
{
	ReapCursor	from = {DT_NOBEGIN};
	Oid			reaper = session_reaper(call);
	TimestampTz now = GetCurrentTimestamp();
	int			reaped = 0;
	int			walked = 0;
	int			examined;

	do
	{
		reaped += session_reap_batch(now, DISTLOCK_REAP_BATCH, reaper, &from,
									 &examined);
		walked += examined;
	} while (examined == DISTLOCK_REAP_BATCH && reaped < limit &&
			 walked < REAP_SOME_WALK * limit);
	examined = 0;
	return reaped + session_reap_promised(now, DISTLOCK_REAP_BATCH, reaper,
										  &examined);
}

/*
 * Reap every session expired now that no call is using and that the
 * caller may reap, in batches; returns how many were reaped.  For
 * reap().
 */
int
dl_reap_all(DistlockCall *call)
{
	ReapCursor	from = {DT_NOBEGIN};
	int			total = 0;
	int			examined;
	Oid			reaper = session_reaper(call);

	do
	{
		total += session_reap_batch(GetCurrentTimestamp(),
									DISTLOCK_REAP_BATCH, reaper, &from,
									&examined);
	} while (examined == DISTLOCK_REAP_BATCH);
	return total + session_reap_promised(GetCurrentTimestamp(),
										 DISTLOCK_REAP_BATCH, reaper,
										 &examined);
}

/*
 * For a session_open() that found the caller at its limit of sessions
 * (*limit): reap the sessions the caller opened whose rows say they have
 * expired, in batches, until it is below its limit; returns whether it is
 * (*limit is then the limit as last read).  Sessions that are dead but
 * not yet reaped would otherwise refuse it: without the background
 * worker, a fleet of workers that all missed their heartbeats could never
 * open a session to reap the old ones in passing.
 *
 * Only the caller's own, and only if that can make room: a refusal undoes
 * the reaping, which a caller retrying would do again each time.  So it
 * reaps nothing when the sessions whose rows say live fill the limit
 * alone, and after a walk that left the role full (sessions in use, or
 * whose rows or jobs others hold, are left) it does not walk again from
 * this connection, for this role, for REAP_VAIN_BACKOFF.  A session whose
 * heartbeats kept their promise in shared memory (beat.c) counts until its
 * row's expiry, ahead of the promise.  Only at READ COMMITTED, as a claim
 * reaps: at REPEATABLE READ the statements would see a snapshot older
 * than the session rows they lock.
 */
static bool
session_make_room(DistlockCall *call, int32 *limit)
{
	static ReapBackoff backoff = {InvalidOid};
	TimestampTz now = GetCurrentTimestamp();
	ReapCursor	from = {DT_NOBEGIN};
	Datum		values[5];
	Datum		live;
	bool		isnull;
	int			n;

	if (IsolationUsesXactSnapshot() ||
		reap_backing_off(&backoff, call->caller, now))
		return false;
	values[0] = ObjectIdGetDatum(call->caller);
	values[1] = TimestampTzGetDatum(now);
	values[2] = Int32GetDatum(*limit);
	dl_exec(&own_live_stmt, values, NULL, 0);
	live = dl_getattr(0, 1, &isnull);
	if (isnull || DatumGetInt64(live) >= *limit)
		return false;
	values[2] = Int32GetDatum(DISTLOCK_REAP_BATCH);
	do
	{
		values[3] = TimestampTzGetDatum(from.expires_at);
		values[4] = UUIDPGetDatum(&from.id);
		n = (int) dl_exec(&own_expired_stmt, values, NULL, 0);
		(void) session_reap_found(n, now, &from);
		if (!dl_limit_full(DL_LIMIT_SESSIONS, call->caller, limit))
			return true;
	} while (n == DISTLOCK_REAP_BATCH);
	reap_back_off(&backoff, call->caller, now);
	return false;
}

/*
 * session_open(ttl interval DEFAULT '15 seconds', owner text DEFAULT NULL,
 *				info jsonb DEFAULT NULL) RETURNS uuid
 *
 * Open a session live until now + ttl; owner and info are labels for people.
 */
Datum
distlock_session_open(PG_FUNCTION_ARGS)
{
	Interval   *ttl = dl_arg_interval(fcinfo, 0, "ttl", false);
	text	   *owner = dl_arg_optional_name(fcinfo, 1, "owner");
	Datum		id = DirectFunctionCall1(gen_random_uuid, (Datum) 0);
	DistlockCall call;
	Datum		values[7];
	char		nulls[7] = "       ";
	TimestampTz now;
	int32		limit;

	dl_enter(&call, "distlock.session_open()", true);
	if (!PG_ARGISNULL(2))
		dl_limit_size(PG_GETARG_DATUM(2), "info", call.caller);
	if (dl_limit_full(DL_LIMIT_SESSIONS, call.caller, &limit) &&
		!session_make_room(&call, &limit))
		dl_limit_refuse(DL_LIMIT_SESSIONS, call.caller, limit);
	now = GetCurrentTimestamp();
	values[0] = id;
	values[1] = owner ? PointerGetDatum(owner) : (Datum) 0;
	nulls[1] = owner ? ' ' : 'n';
	values[2] = PG_ARGISNULL(2) ? (Datum) 0 : PG_GETARG_DATUM(2);
	nulls[2] = PG_ARGISNULL(2) ? 'n' : ' ';
	values[3] = PointerGetDatum(ttl);
	values[4] = TimestampTzGetDatum(now);
	values[5] = TimestampTzGetDatum(dl_add_interval(now, ttl));
	values[6] = ObjectIdGetDatum(call.caller);
	dl_exec(&insert_stmt, values, nulls, 0);
	dl_leave(&call);

	PG_RETURN_DATUM(id);
}

/*
 * A heartbeat that keeps its promise in shared memory (beat.c), writing
 * nothing: at READ COMMITTED, with the session's use lock to be had at
 * once (so that a close or reap in flight finds it, and it them), its
 * beat lock held, and the row already ahead of the promise.  *live says
 * whether the session was live; returns false, having let go of the use
 * lock, when the row must be written (the usual path then decides).
 */
static bool
heartbeat_in_memory(Datum session_id, bool *live)
{
	TimestampTz expires;
	TimestampTz row;
	TimestampTz now;
	Interval   *ttl;
	Oid			creator;

	if (IsolationUsesXactSnapshot() ||
		!session_lock(session_id, SESSION_TAG_USE, ShareLock, true))
		return false;
	if (!session_read_row(NULL, session_id, &expires, &creator, NULL, &row,
						  &ttl))
	{
		session_unlock(session_id, SESSION_TAG_USE, ShareLock);
		*live = false;
		return true;
	}
	now = GetCurrentTimestamp();
	/* expired is final: we hold the beat lock */
	if (expires <= now)
	{
		session_unlock(session_id, SESSION_TAG_USE, ShareLock);
		*live = false;
		return true;
	}
	*live = true;
	if (dl_beat_skip_write(session_id, row, dl_add_interval(now, ttl)))
		return true;
	/* the row is written as without shared memory, the use lock not held */
	session_unlock(session_id, SESSION_TAG_USE, ShareLock);
	return false;
}

/*
 * For a heartbeat that must write session_id's row, its beat lock held:
 * lock the row if the session is live, and say whether it is.  An expired
 * session stays dead, so one found expired is refused without waiting for
 * a row lock that a reaper may hold until its transaction ends (the beat
 * lock held meanwhile would make contenders count the session live), at
 * every isolation level.  The session may expire between that look and
 * the lock, and be reaped in that moment: so the row is locked without
 * waiting first, and a row somebody holds is judged again, on a clock
 * read after its holder locked it.  A reaper locks only what it found
 * expired, so a session still live then is held by a close (or by an
 * administrator's drop_owned()), which the heartbeat waits for.
 */
static bool
heartbeat_lock_row(Datum session_id, DistlockCall *call)
{
	SessionState state;

	if (session_state_now(session_id, NULL, NULL) != SESSION_LIVE)
		return false;
	state = session_lock_state(&lock_heartbeat_skip_stmt, session_id, call);
	if (state != SESSION_MISSING)
		return state == SESSION_LIVE;
	/* held by somebody, or gone */
	return session_state_now(session_id, NULL, NULL) == SESSION_LIVE &&
		session_lock_state(&lock_heartbeat_stmt, session_id, call) ==
		SESSION_LIVE;
}

/*
 * heartbeat(session_id uuid) RETURNS boolean
 *
 * Extend a live session to now + its ttl.  False when the session has
 * expired, was closed or reaped, or never existed: the worker has lost its
 * claims and session-bound locks and must stop.
 */
Datum
distlock_heartbeat(PG_FUNCTION_ARGS)
{
	DistlockCall call;
	Datum		values[3];
	Oid			creator;
	bool		live;
	bool		done = false;

	dl_arg_not_null(fcinfo, 0, "session_id");
	values[0] = PG_GETARG_DATUM(0);

	dl_enter(&call, "distlock.heartbeat()", true);
	live = session_read(values[0], NULL, &creator, NULL);
	if (live)
	{
		/* another role's session: refuse before taking any of its locks */
		session_check_access(&call, creator, values[0]);
		session_lock(values[0], SESSION_TAG_BEAT, ExclusiveLock, false);

		done = heartbeat_in_memory(values[0], &live);
		if (!done)
			live = heartbeat_lock_row(values[0], &call);
		/* refused: nothing is in flight, judges need not count it live */
		if (!live)
			session_unlock(values[0], SESSION_TAG_BEAT, ExclusiveLock);
	}
	if (live && !done)
	{
		bool		isnull;
		Interval   *ttl = DatumGetIntervalP(dl_getattr(0, SESSION_COL_TTL,
														&isnull));
		TimestampTz row = DatumGetTimestampTz(dl_getattr(0, SESSION_COL_EXPIRES,
														 &isnull));
		TimestampTz now = GetCurrentTimestamp();
		TimestampTz promise = dl_add_interval(now, ttl);

		values[1] = TimestampTzGetDatum(now);
		values[2] = TimestampTzGetDatum(dl_beat_write(values[0], row, promise,
													  promise - now));
		dl_exec(&heartbeat_stmt, values, NULL, 0);
	}
	dl_leave(&call);

	PG_RETURN_BOOL(live);
}

/* An administrator's end of a session, which must not wait. */
static DistlockStmt lock_drop_stmt = {
	"SELECT 1 FROM distlock.sessions WHERE id = $1 FOR UPDATE SKIP LOCKED",
	1, {UUIDOID}
};

/*
 * Whether every running job of session $1 could be locked, without waiting:
 * one held by another transaction, or changed since this statement's
 * snapshot, makes the counts differ.
 */
static DistlockStmt lock_drop_jobs_stmt = {
	"SELECT count(*) = (SELECT count(*) FROM distlock.jobs"
	"  WHERE session_id = $1 AND status = 'running')"
	" FROM (SELECT FROM distlock.jobs"
	"  WHERE session_id = $1 AND status = 'running'"
	"  FOR UPDATE SKIP LOCKED) j",
	1, {UUIDOID}
};

/* Lock the row and every running job of session values[0], or nothing. */
static bool
session_drop_lock(void *arg)
{
	Datum	   *values = (Datum *) arg;
	bool		locked = false;

	if (dl_exec(&lock_drop_stmt, values, NULL, 1) == 1)
	{
		bool		isnull;

		SPI_freetuptable(SPI_tuptable);
		dl_exec(&lock_drop_jobs_stmt, values, NULL, 1);
		locked = DatumGetBool(dl_getattr(0, 1, &isnull));
	}
	/* drop_owned() ends many sessions in one call: keep no result of each */
	SPI_freetuptable(SPI_tuptable);
	return locked;
}

/*
 * End session_id, live or not, for an administrator (drop_owned() in
 * admin.c, which has checked that the caller may act for its role), as
 * session_close() does but without waiting for anything: false, ending
 * nothing, if a call of the session is in flight, or its row or one of its
 * running jobs is held.  A rerun ends it once they are done.
 *
 * Unlike a reap's, which hands back what it can of a session that is dead
 * anyway, this end is all or nothing: the session may be live, and a job
 * handed back while its worker goes on would be run twice.  So its row and
 * every running job (the use lock keeps claims from adding any) are locked
 * first, in a subtransaction, which is rolled back if one could not be:
 * a session left keeps nothing locked until the transaction ends, which
 * would hold up its heartbeats that write its row, its worker's
 * acknowledgements and the reaps of it.  (Each session ended adds a
 * subtransaction to the caller's: past 64 of them, snapshots that
 * concurrent transactions take see the subtransaction cache overflowed
 * until the caller's transaction ends.)
 */
bool
dl_session_end_nowait(Datum session_id)
{
	Datum		values[1] = {session_id};
	bool		locked;

	if (session_used_by_me(session_id) ||
		!session_lock(session_id, SESSION_TAG_USE, ExclusiveLock, true))
		return false;
	locked = dl_subxact(session_drop_lock, NULL, values);
	if (locked &&
		session_end(session_id, GetCurrentTimestamp(),
					"session dropped by an administrator", SESSION_END_DROP))
		return true;
	session_unlock(session_id, SESSION_TAG_USE, ExclusiveLock);
	return false;
}

/*
 * session_close(session_id uuid) RETURNS boolean
 *
 * End a live session now: its session-bound locks are free and its running
 * jobs pending again (failed if out of attempts).  False, changing nothing,
 * when the session does not exist or has already expired (reap() tidies
 * those).
 */
Datum
distlock_session_close(PG_FUNCTION_ARGS)
{
	DistlockCall call;
	Datum		session_id;
	Oid			creator;
	bool		live;

	dl_arg_not_null(fcinfo, 0, "session_id");
	session_id = PG_GETARG_DATUM(0);

	dl_enter(&call, "distlock.session_close()", true);
	switch (session_state_now(session_id, &creator, NULL))
	{
		case SESSION_MISSING:
			live = false;
			break;
		case SESSION_EXPIRED:
			/* nothing revives it: refuse without waiting for a reaper */
			session_check_access(&call, creator, session_id);
			live = false;
			break;
		default:
			/* another role's session: refuse before taking its locks */
			session_check_access(&call, creator, session_id);
			/* wait for the session's calls in flight */
			session_lock(session_id, SESSION_TAG_USE, ExclusiveLock, false);
			live = session_lock_state(&lock_close_stmt, session_id, &call) ==
				SESSION_LIVE;
			if (live)
				(void) session_end(session_id, GetCurrentTimestamp(),
								   "session closed", SESSION_END_CLOSE);
			break;
	}
	dl_leave(&call);

	PG_RETURN_BOOL(live);
}

/*
 * reap() RETURNS integer
 *
 * Delete every expired session that no call is using and that the caller
 * may reap (session_reaper()), handing its running jobs back; returns how
 * many sessions it reaped.  Correctness never waits for this: claim() reaps in
 * passing, and locks of dead sessions are free.
 */
Datum
distlock_reap(PG_FUNCTION_ARGS)
{
	DistlockCall call;
	int			total;

	dl_enter(&call, "distlock.reap()", true);
	total = dl_reap_all(&call);
	dl_leave(&call);

	PG_RETURN_INT32(total);
}
