/*-------------------------------------------------------------------------
 *
 * session.c
 *		Worker sessions: open, heartbeat, close, reap.
 *
 * A session is a row in distlock.sessions that is live while the server
 * clock is before its expires_at.  Each heartbeat pushes expires_at to
 * now + ttl; once expires_at has passed, heartbeat() refuses, so a session
 * that has expired stays dead.  Its session-bound locks are free and its
 * running jobs claimable from that moment, because every decision that
 * depends on a session reads its expires_at (see distlock.h); reap() only
 * deletes the row and hands the jobs back so that the tables stay small.
 *
 * Concurrency: heartbeat locks the row FOR NO KEY UPDATE before it reads the
 * clock, so it is ordered against a lock contender that holds the row FOR
 * SHARE while judging the session dead: either the heartbeat comes first and
 * the contender sees the session extended, or the contender comes first and
 * the heartbeat finds the session expired.
 *
 * A call the session itself makes (claim, complete, fail, an acquire bound
 * to it) holds the session's use lock (session_use_lock()) in ShareLock
 * until its transaction ends; closing holds it in ExclusiveLock, so it
 * waits for every such call in flight, and reaping skips a session whose
 * use lock it cannot take at once.  So a job being completed is never
 * handed back, and no job is claimed for a session that is being closed.
 * The use lock is a heavyweight lock in memory: unlike the row lock FOR KEY
 * SHARE that it replaces at READ COMMITTED, it writes no WAL, dirties no
 * page and never makes a heartbeat of the same session create a MultiXact.
 * Under it, the session row is read without a row lock (see
 * session_acting_state() for why that read can be trusted).  At REPEATABLE
 * READ and SERIALIZABLE the call also locks the row FOR KEY SHARE, as
 * before: a row closed or reaped since the transaction's snapshot must fail
 * with 40001 rather than be read as it was.
 *
 * Only a role that may act for the session's creator (access.c) may use,
 * heartbeat or close it; anyone may judge whether it is live, and reap()
 * tidies expired sessions of every role.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/session.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/lsyscache.h"
#include "utils/uuid.h"

#include "distlock.h"

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
	"SELECT expires_at, created_by FROM distlock.sessions WHERE id = $1"
	" FOR KEY SHARE",
	1, {UUIDOID}
};

static DistlockStmt lock_share_stmt = {
	"SELECT expires_at, created_by FROM distlock.sessions WHERE id = $1"
	" FOR SHARE",
	1, {UUIDOID}
};

static DistlockStmt lock_heartbeat_stmt = {
	"SELECT expires_at, created_by, ttl FROM distlock.sessions WHERE id = $1"
	" FOR NO KEY UPDATE",
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
 * becomes failed when it has used all its attempts.
 */
static DistlockStmt release_jobs_stmt = {
	"UPDATE distlock.jobs SET"
	" status = CASE WHEN attempts >= max_attempts"
	"  THEN 'failed' ELSE 'pending' END::distlock.job_status,"
	" session_id = CASE WHEN attempts >= max_attempts THEN session_id END,"
	" finished_at = CASE WHEN attempts >= max_attempts THEN $2 END,"
	" last_error = $3"
	" WHERE session_id = $1 AND status = 'running'",
	3, {UUIDOID, TIMESTAMPTZOID, TEXTOID}
};

static DistlockStmt delete_stmt = {
	"DELETE FROM distlock.sessions WHERE id = $1",
	1, {UUIDOID}
};

/*
 * Sessions expired at $1, in order of expiry from ($3, $4) on: the
 * candidates for reaping, read without locking them.
 */
static DistlockStmt find_expired_stmt = {
	"SELECT id, expires_at FROM distlock.sessions"
	" WHERE expires_at <= $1 AND (expires_at, id) > ($3, $4)"
	" ORDER BY expires_at, id LIMIT $2",
	4, {TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, UUIDOID}
};

/*
 * One candidate, locked for reaping unless somebody else holds it (a
 * heartbeat, a contender judging it, another reaper, a call at REPEATABLE
 * READ).  A row a heartbeat extended since the candidates were read fails
 * the recheck of expires_at.  Either way a session is only taken once it
 * has expired for good, since nothing revives an expired session.
 */
static DistlockStmt lock_expired_stmt = {
	"SELECT id FROM distlock.sessions WHERE id = $1 AND expires_at <= $2"
	" FOR UPDATE SKIP LOCKED",
	2, {UUIDOID, TIMESTAMPTZOID}
};

/* What a session row, once locked, says about the session. */
typedef enum SessionState
{
	SESSION_MISSING,			/* closed, reaped or never opened */
	SESSION_EXPIRED,
	SESSION_LIVE
} SessionState;

/*
 * The state of a session whose row, read or locked just now, says expires
 * and creator.  With a call, the caller must be allowed to act on the
 * session (42501 otherwise).  The clock is read only now, after the row.
 */
static SessionState
session_judge(DistlockCall *call, Datum session_id, TimestampTz expires,
			  Oid creator)
{
	if (call)
		dl_check_session_access(call, creator, session_id);
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

	if (dl_exec(stmt, values, NULL, 1) == 0)
		return SESSION_MISSING;
	return session_judge(call, session_id,
						 DatumGetTimestampTz(dl_getattr(0, SESSION_COL_EXPIRES,
														&isnull)),
						 DatumGetObjectId(dl_getattr(0, SESSION_COL_CREATOR,
													 &isnull)));
}

/*
 * Raise 42501 unless the caller may act on session_id, which role creator
 * opened.
 */
void
dl_check_session_access(DistlockCall *call, Oid creator, Datum session_id)
{
	if (!dl_may_act_for(call, creator))
		dl_check_access(call, creator, "session",
						DatumGetCString(DirectFunctionCall1(uuid_out,
															session_id)));
}

/*
 * Take session_id's use lock in mode, until the transaction ends: ShareLock
 * for a call the session makes, ExclusiveLock to close or reap it.  With
 * dont_wait, return false at once if another transaction holds a
 * conflicting mode.  The lock tag is an object lock on distlock.sessions
 * and 48 bits of the session id; two sessions that share a tag only wait
 * for each other's calls a little more than they need to.
 */
static bool
session_use_lock(Datum session_id, LOCKMODE mode, bool dont_wait)
{
	const uint8 *id = DatumGetUUIDP(session_id)->data;
	Oid			sessions;
	LOCKTAG		tag;

	sessions = get_relname_relid("sessions",
								 get_namespace_oid("distlock", false));
	if (!OidIsValid(sessions))
		elog(ERROR, "table distlock.sessions does not exist");
	SET_LOCKTAG_OBJECT(tag, MyDatabaseId, sessions,
					   ((uint32) id[0] << 24) | ((uint32) id[1] << 16) |
					   ((uint32) id[2] << 8) | id[3],
					   ((uint16) id[4] << 8) | id[5]);
	return LockAcquire(&tag, mode, false, dont_wait) != LOCKACQUIRE_NOT_AVAIL;
}

static void
session_use_unlock(Datum session_id, LOCKMODE mode)
{
	const uint8 *id = DatumGetUUIDP(session_id)->data;
	LOCKTAG		tag;

	SET_LOCKTAG_OBJECT(tag, MyDatabaseId,
					   get_relname_relid("sessions",
										 get_namespace_oid("distlock", false)),
					   ((uint32) id[0] << 24) | ((uint32) id[1] << 16) |
					   ((uint32) id[2] << 8) | id[3],
					   ((uint16) id[4] << 8) | id[5]);
	LockRelease(&tag, mode, false);
}

/*
 * The state of session_id, through which the caller acts, with the
 * session's use lock held in ShareLock for the rest of the transaction, so
 * that it is neither closed nor reaped before the call's work commits.  A
 * session of a role the caller may not act for raises 42501.
 *
 * At READ COMMITTED the row is read without a row lock, after the use lock
 * is granted.  A close or reap that finished before that committed before
 * the read's snapshot was taken (a transaction releases its locks after it
 * commits), so "missing" is true.  "Live" is true: expires_at only moves
 * forward while the row exists, and a reaper only takes sessions that had
 * expired when it looked.  Only "expired" may be stale, should a heartbeat
 * have committed since the snapshot: that one is checked again under a row
 * lock FOR KEY SHARE, which sees the latest committed version and reads
 * the clock after it is granted.  At REPEATABLE READ and SERIALIZABLE the
 * row is locked FOR KEY SHARE as well, which fails with 40001 if the row
 * was closed or reaped since the transaction's snapshot.
 */
static SessionState
session_acting_state(DistlockCall *call, Datum session_id,
					 bool *others_expired)
{
	SessionState state;
	TimestampTz expires;
	Oid			creator;

	session_use_lock(session_id, ShareLock, false);
	if (others_expired)
		*others_expired = true;
	if (IsolationUsesXactSnapshot())
		return session_lock_state(&lock_key_share_stmt, session_id, call);
	if (!dl_session_read(session_id, &expires, &creator, others_expired))
		return SESSION_MISSING;
	state = session_judge(call, session_id, expires, creator);
	if (state == SESSION_EXPIRED)
		state = session_lock_state(&lock_key_share_stmt, session_id, call);
	return state;
}

/*
 * Whether session_id is live, locking its row so that it cannot be reaped or
 * closed before our transaction ends.  share (FOR SHARE) also orders us
 * against its heartbeats; callers judging another session's liveness need
 * that, a session acting for itself does not.
 */
bool
dl_session_is_live(Datum session_id, bool share)
{
	return session_lock_state(share ? &lock_share_stmt : &lock_key_share_stmt,
							  session_id, NULL) == SESSION_LIVE;
}

/*
 * Whether session_id, through which the caller acts, is live; it is not
 * reaped or closed under the call (session_acting_state()).  A session of a
 * role the caller may not act for raises 42501.
 */
bool
dl_session_acting(DistlockCall *call, Datum session_id)
{
	return session_acting_state(call, session_id, NULL) == SESSION_LIVE;
}

/*
 * The calling worker acts through session_id: raise 42704 if it does not
 * exist, 42501 if it is another role's, and 55000 if it has expired.  The
 * session is not reaped or closed under the call (session_acting_state()).
 * Returns whether some session may have expired (so that a claim should
 * reap), as seen by the same read; always true at REPEATABLE READ and
 * SERIALIZABLE.
 */
bool
dl_session_use(DistlockCall *call, Datum session_id)
{
	bool		others_expired;

	switch (session_acting_state(call, session_id, &others_expired))
	{
		case SESSION_LIVE:
			return others_expired;
		case SESSION_MISSING:
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("session %s does not exist",
							DatumGetCString(DirectFunctionCall1(uuid_out,
																session_id))),
					 errhint("A session ceases to exist when it is closed or reaped.")));
			break;
		case SESSION_EXPIRED:
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("session %s has expired",
							DatumGetCString(DirectFunctionCall1(uuid_out,
																session_id))),
					 errhint("Open a new session, and heartbeat more often than its ttl.")));
			break;
	}
	pg_unreachable();
}

/* Hand back session_id's running jobs and delete it; its row is locked. */
static void
session_end(Datum session_id, TimestampTz now, const char *why)
{
	Datum		values[3];

	values[0] = session_id;
	values[1] = TimestampTzGetDatum(now);
	values[2] = CStringGetTextDatum(why);
	dl_exec(&release_jobs_stmt, values, NULL, 0);
	dl_exec(&delete_stmt, values, NULL, 0);
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
 * Reap the sessions among the next limit candidates after *from that
 * expired before now and that no call is using; returns how many were
 * reaped, sets *examined to the number of candidates and moves *from past
 * them.
 *
 * A candidate is reaped only if its use lock can be had at once (no call
 * of the session is in flight) and then its row lock (see
 * lock_expired_stmt).  The use lock is let go again once the row is
 * locked: a call that takes it after that finds the session expired,
 * checks again under a row lock, and so waits for our delete.
 */
static int
session_reap_batch(TimestampTz now, int limit, ReapCursor *from,
				   int *examined)
{
	Datum		values[4];
	uint64		n;
	int			reaped = 0;
	pg_uuid_t  *ids;

	values[0] = TimestampTzGetDatum(now);
	values[1] = Int32GetDatum(limit);
	values[2] = TimestampTzGetDatum(from->expires_at);
	values[3] = UUIDPGetDatum(&from->id);
	n = dl_exec(&find_expired_stmt, values, NULL, 0);
	*examined = (int) n;
	if (n == 0)
		return 0;

	/* the loop below runs statements of its own: copy the ids out first */
	ids = palloc(n * sizeof(pg_uuid_t));
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;

		ids[i] = *DatumGetUUIDP(dl_getattr(i, 1, &isnull));
		if (i == n - 1)
			from->expires_at = DatumGetTimestampTz(dl_getattr(i, 2, &isnull));
	}
	from->id = ids[n - 1];

	for (uint64 i = 0; i < n; i++)
	{
		Datum		lock_values[2];
		bool		locked;

		lock_values[0] = UUIDPGetDatum(&ids[i]);
		lock_values[1] = TimestampTzGetDatum(now);
		if (!session_use_lock(lock_values[0], ExclusiveLock, true))
			continue;			/* in use: a later reap takes it */
		locked = dl_exec(&lock_expired_stmt, lock_values, NULL, 0) == 1;
		session_use_unlock(lock_values[0], ExclusiveLock);
		if (!locked)
			continue;
		session_end(lock_values[0], now, "session expired");
		reaped++;
	}
	pfree(ids);
	return reaped;
}

/*
 * Reap up to limit of the sessions that expired first before now, skipping
 * those a call is using; returns how many were reaped.
 */
int
dl_reap_expired(TimestampTz now, int limit)
{
	ReapCursor	from = {DT_NOBEGIN};
	int			examined;

	return session_reap_batch(now, limit, &from, &examined);
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

	dl_enter(&call, "distlock.session_open()", true);
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
	bool		live;

	dl_arg_not_null(fcinfo, 0, "session_id");
	values[0] = PG_GETARG_DATUM(0);

	dl_enter(&call, "distlock.heartbeat()", true);
	live = session_lock_state(&lock_heartbeat_stmt, values[0], &call) ==
		SESSION_LIVE;
	if (live)
	{
		bool		isnull;
		Interval   *ttl = DatumGetIntervalP(dl_getattr(0, SESSION_COL_TTL,
														&isnull));
		TimestampTz now = GetCurrentTimestamp();

		values[1] = TimestampTzGetDatum(now);
		values[2] = TimestampTzGetDatum(dl_add_interval(now, ttl));
		dl_exec(&heartbeat_stmt, values, NULL, 0);
	}
	dl_leave(&call);

	PG_RETURN_BOOL(live);
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
	bool		live;

	dl_arg_not_null(fcinfo, 0, "session_id");
	session_id = PG_GETARG_DATUM(0);

	dl_enter(&call, "distlock.session_close()", true);
	/* wait for the session's calls in flight; the use lock comes first */
	session_use_lock(session_id, ExclusiveLock, false);
	live = session_lock_state(&lock_close_stmt, session_id, &call) ==
		SESSION_LIVE;
	if (live)
		session_end(session_id, GetCurrentTimestamp(), "session closed");
	dl_leave(&call);

	PG_RETURN_BOOL(live);
}

/*
 * reap() RETURNS integer
 *
 * Delete every expired session that no call is using, handing its running
 * jobs back; returns how many sessions it reaped.  Correctness never waits
 * for this: claim() reaps in passing, and locks of dead sessions are free.
 */
Datum
distlock_reap(PG_FUNCTION_ARGS)
{
	DistlockCall call;
	ReapCursor	from = {DT_NOBEGIN};
	int			total = 0;
	int			examined;

	dl_enter(&call, "distlock.reap()", true);
	do
	{
		total += session_reap_batch(GetCurrentTimestamp(),
									DISTLOCK_REAP_BATCH, &from, &examined);
	} while (examined == DISTLOCK_REAP_BATCH);
	dl_leave(&call);

	PG_RETURN_INT32(total);
}
