/*-------------------------------------------------------------------------
 *
 * lease.c
 *		Lease locks with fencing tokens: try_acquire, renew, release, fence.
 *
 * A lock is a row of distlock.locks.  Its holder's claim is intact while
 * owner is set and, for a session-bound lease, the session is live; the
 * lease blocks other owners while the claim is intact and expires_at is NULL
 * or still ahead on the server clock.  An intact claim whose time has run
 * out may still be renewed or re-entered by its owner, keeping its token,
 * until another owner takes the lock: nobody else was granted a token in
 * between, so fencing is unaffected.
 *
 * A grant may set a minimum hold (ShedLock's lockAtLeastFor): hold_until,
 * acquired_at + min_hold.  Until then the lock blocks every other owner
 * whatever becomes of its holder's claim, so a release (or expiry, or the
 * end of the session) before hold_until leaves the lock held by nobody who
 * can renew it.  Re-entry recomputes hold_until from the same acquired_at.
 *
 * Fencing tokens come from distlock.token_seq, drawn only while the lock row
 * is locked FOR UPDATE, so a grant's token exceeds every token granted
 * earlier for that name; since the sequence is one for all names, that
 * holds for the life of the database, even once maintain() has deleted a
 * free lock's row.  A sequence rather than a per-row counter also means
 * that a token seen in a transaction that then rolled back is not handed
 * out again.
 *
 * A grant belongs to the role that made it (created_by): only a role that
 * may act for it (access.c) may renew, release or fence it, or re-enter it
 * with the same owner string.  To any other role a held lock is simply held.
 *
 * Concurrency: every decision locks the lock row first (FOR UPDATE, or FOR
 * SHARE in fence()), then judges the holder's session if the lease is bound
 * to one (on its committed row, ordered against its heartbeats by the beat
 * lock, without waiting and without keeping a lock: session.c), and only
 * then reads the clock (see distlock.h).  A grant bound to the caller's own
 * session is made only while that session is still live at the grant's
 * instant.  Every token drawn is made durable before it is returned, so no
 * crash hands it out again, and carries the timeline's epoch, so no failover
 * does (token.c).  Two contenders are thus serialised on the lock row and
 * the second sees the first's grant.
 * fence() keeps its FOR SHARE lock until the caller's transaction ends, so
 * no other owner can take the lock before the writes fenced by it commit.
 *
 * Three shortcuts keep the common cases to one statement that writes, or
 * none, without breaking that order:
 *
 *	- A refusal without a lock.  try_acquire() first reads the committed
 *	  row and its holder's session without locking them.  If, at READ
 *	  COMMITTED, they show the lock held by another owner (claim intact and
 *	  unexpired on the clock read after them) or on hold, it returns NULL
 *	  at once: no row lock, no transaction id, no WAL, no commit to flush.
 *	  That is the answer a locked decision would have given at the instant
 *	  of the read's snapshot, which lies inside the call: while a holder's
 *	  claim is intact its expires_at only moves forward (renew, re-entry),
 *	  a session's expires_at only moves forward while its row exists, and
 *	  hold_until does not move before it passes except by a re-entry, which
 *	  keeps the lock taken anyway.  At REPEATABLE READ and SERIALIZABLE the
 *	  snapshot may be older than the call, so the locked path decides.
 *	- A grant of a released lock (no owner, no hold in force) is a single
 *	  conditional UPDATE, at the instant now read before it: the row must
 *	  be released, off hold at now, and last changed (renewed_at: every
 *	  change sets it to its own clock reading) at or before now.  The
 *	  UPDATE locks the row and, should the row have changed since it was
 *	  read, re-evaluates the condition and the new values on the latest
 *	  version (READ COMMITTED's recheck), drawing the token again.  That
 *	  condition cannot turn false as time passes, only by a change to the
 *	  row, so deciding it on a clock read before the row lock is granted is
 *	  safe: whatever version the recheck sees was free from its last change
 *	  until now, so the new lease overlaps no earlier one, and a grant made
 *	  since the read is seen by the recheck, so the token exceeds every
 *	  token granted before.  Anything else (the name's first grant, a
 *	  re-entry, a takeover of an expired lease, a change after now, a lost
 *	  race) takes the locked path.
 *	- release() of a lease not bound to a session is a single UPDATE that
 *	  matches the owner; the row lock it takes orders it against every
 *	  other decision, and no clock is involved.  A session-bound lease, or
 *	  a release that matches nothing, takes the locked path.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/lease.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include "distlock.h"

PG_FUNCTION_INFO_V1(distlock_try_acquire);
PG_FUNCTION_INFO_V1(distlock_renew);
PG_FUNCTION_INFO_V1(distlock_release);
PG_FUNCTION_INFO_V1(distlock_fence);

/* Columns of lock_for_update_stmt and lock_for_share_stmt. */
#define LOCK_COL_OWNER		1
#define LOCK_COL_SESSION	2
#define LOCK_COL_TOKEN		3
#define LOCK_COL_EXPIRES	4
#define LOCK_COL_HOLD		5
#define LOCK_COL_CREATOR	6

static DistlockStmt lock_for_update_stmt = {
	"SELECT owner, session_id, token, expires_at, hold_until, created_by"
	" FROM distlock.locks WHERE name = $1 FOR UPDATE",
	1, {TEXTOID}
};

/*
 * The committed row and its holder's session expiry, read without locking
 * either, for try_acquire()'s refusal without a lock.
 */
static DistlockStmt peek_stmt = {
	"SELECT l.owner, l.session_id, l.token, l.expires_at, l.hold_until,"
	" l.created_by, s.expires_at"
	" FROM distlock.locks l LEFT JOIN distlock.sessions s"
	" ON s.id = l.session_id WHERE l.name = $1",
	1, {TEXTOID}
};
#define LOCK_COL_HOLDER_EXPIRES	7

static DistlockStmt lock_for_share_stmt = {
	"SELECT owner, session_id, token, expires_at, hold_until, created_by"
	" FROM distlock.locks WHERE name = $1 FOR SHARE",
	1, {TEXTOID}
};

/* First grant of a name.  The token is drawn for the new row only. */
static DistlockStmt insert_stmt = {
	"INSERT INTO distlock.locks (name, owner, session_id, token,"
	" acquired_at, renewed_at, expires_at, hold_until, created_by)"
	" VALUES ($1, $2, $3, nextval('distlock.token_seq'), $4, $4, $5,"
	" $4 + $7, $6)"
	" ON CONFLICT (name) DO NOTHING RETURNING token",
	7, {TEXTOID, TEXTOID, UUIDOID, TIMESTAMPTZOID, TIMESTAMPTZOID, REGROLEOID,
	INTERVALOID}
};

/*
 * A grant on a locked row: re-entry ($8) keeps token and acquired_at, and
 * hold_until counts min_hold ($7) from that acquired_at.
 */
static DistlockStmt grant_stmt = {
	"UPDATE distlock.locks SET owner = $2, session_id = $3,"
	" token = CASE WHEN $8 THEN token ELSE nextval('distlock.token_seq') END,"
	" acquired_at = CASE WHEN $8 THEN acquired_at ELSE $4 END,"
	" renewed_at = $4, expires_at = $5,"
	" hold_until = CASE WHEN $8 THEN acquired_at ELSE $4 END + $7,"
	" created_by = $6"
	" WHERE name = $1 RETURNING token",
	8, {TEXTOID, TEXTOID, UUIDOID, TIMESTAMPTZOID, TIMESTAMPTZOID, REGROLEOID,
	INTERVALOID, BOOLOID}
};

/*
 * A grant at $4 of a released lock that is off hold at $4 and has not
 * changed since $4, if it still is so once its row is locked (see the
 * header comment); the columns as grant_stmt sets them for a new grant.
 */
static DistlockStmt grant_released_stmt = {
	"UPDATE distlock.locks SET owner = $2, session_id = $3,"
	" token = nextval('distlock.token_seq'),"
	" acquired_at = $4, renewed_at = $4, expires_at = $5,"
	" hold_until = $4 + $7, created_by = $6"
	" WHERE name = $1 AND owner IS NULL AND renewed_at <= $4"
	" AND (hold_until IS NULL OR hold_until <= $4)"
	" RETURNING token",
	7, {TEXTOID, TEXTOID, UUIDOID, TIMESTAMPTZOID, TIMESTAMPTZOID, REGROLEOID,
	INTERVALOID}
};

static DistlockStmt renew_stmt = {
	"UPDATE distlock.locks SET renewed_at = $2, expires_at = $3"
	" WHERE name = $1",
	3, {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

static DistlockStmt release_stmt = {
	"UPDATE distlock.locks SET owner = NULL, session_id = NULL,"
	" expires_at = NULL, renewed_at = $2"
	" WHERE name = $1",
	2, {TEXTOID, TIMESTAMPTZOID}
};

/*
 * release() of owner $3's lease, not bound to a session, in one statement;
 * returns the grant's role for the caller's role check.
 */
static DistlockStmt release_own_stmt = {
	"UPDATE distlock.locks SET owner = NULL, session_id = NULL,"
	" expires_at = NULL, renewed_at = $2"
	" WHERE name = $1 AND owner = $3 AND session_id IS NULL"
	" RETURNING created_by",
	3, {TEXTOID, TIMESTAMPTZOID, TEXTOID}
};

/* The lock row as read under its row lock. */
typedef struct LeaseRow
{
	text	   *owner;			/* NULL when released */
	bool		has_session;
	Datum		session_id;
	int64		token;
	bool		has_expiry;
	TimestampTz expires_at;
	bool		has_hold;
	TimestampTz hold_until;
	Oid			created_by;		/* role of the current (or last) grant */
} LeaseRow;

/*
 * Lock the row of lock name with stmt and read it into *row; false if the
 * name has never been acquired.  With a call, a current grant (one with an
 * owner) must be of a role the caller may act for, or 42501 is raised.
 */
static bool
lease_lock_row(DistlockStmt *stmt, text *name, LeaseRow *row,
			   DistlockCall *call)
{
	Datum		values[1] = {PointerGetDatum(name)};
	bool		isnull;
	Datum		d;

	if (dl_exec(stmt, values, NULL, 1) == 0)
		return false;

	d = dl_getattr(0, LOCK_COL_OWNER, &isnull);
	row->owner = isnull ? NULL : DatumGetTextPP(d);
	row->session_id = dl_getattr(0, LOCK_COL_SESSION, &isnull);
	row->has_session = !isnull;
	row->token = dl_getint64(0, LOCK_COL_TOKEN);
	d = dl_getattr(0, LOCK_COL_EXPIRES, &isnull);
	row->has_expiry = !isnull;
	row->expires_at = isnull ? 0 : DatumGetTimestampTz(d);
	d = dl_getattr(0, LOCK_COL_HOLD, &isnull);
	row->has_hold = !isnull;
	row->hold_until = isnull ? 0 : DatumGetTimestampTz(d);
	row->created_by = DatumGetObjectId(dl_getattr(0, LOCK_COL_CREATOR, &isnull));
	if (call && row->owner != NULL)
		dl_check_access(call, row->created_by, DL_OBJECT_LOCK,
						text_to_cstring(name));
	return true;
}

/*
 * Whether the holder's claim on a locked row is intact: it has an owner and,
 * if bound to a session, the session is live.  contender: the answer is for
 * somebody who would take the lock if not, so a session whose heartbeat is
 * in flight counts as live; for the holder's own renew, release and fence
 * it counts as ended (session.c: dl_session_is_live()).
 */
static bool
lease_claim_intact(LeaseRow *row, bool contender)
{
	if (row->owner == NULL)
		return false;
	return !row->has_session ||
		dl_session_is_live(row->session_id, contender);
}

/*
 * Whether a locked row keeps other owners out at now: its minimum hold has
 * not passed, or its holder's claim (intact, as lease_claim_intact() found)
 * has no end or an end still ahead.
 */
static bool
lease_blocks(LeaseRow *row, bool intact, TimestampTz now)
{
	if (row->has_hold && row->hold_until > now)
		return true;
	return intact && (!row->has_expiry || row->expires_at > now);
}

/* Whether a row's owner is owner. */
static bool
lease_owned_by(LeaseRow *row, text *owner)
{
	return row->owner != NULL &&
		VARSIZE_ANY_EXHDR(row->owner) == VARSIZE_ANY_EXHDR(owner) &&
		memcmp(VARDATA_ANY(row->owner), VARDATA_ANY(owner),
			   VARSIZE_ANY_EXHDR(owner)) == 0;
}

/* End of a lease granted now for ttl (NULL: no end). */
static void
lease_expiry(Interval *ttl, TimestampTz now, Datum *value, char *null)
{
	*value = ttl ? TimestampTzGetDatum(dl_add_interval(now, ttl)) : (Datum) 0;
	*null = ttl ? ' ' : 'n';
}

/*
 * The instant of a grant bound to a session (has_session) that the call
 * found live until *session_expires: the session must still be live then,
 * or the grant would be dead on arrival (55000).  Should that expiry have
 * passed, the session is judged again on its committed row, since a
 * heartbeat may have extended it meanwhile (the call holds its use lock,
 * so it has not been closed or reaped).  Called again after a grant
 * statement that may have waited for the lock row; its error undoes the
 * grant.
 */
static TimestampTz
lease_grant_now(bool has_session, TimestampTz *session_expires,
				Datum session_id)
{
	TimestampTz now = GetCurrentTimestamp();

	if (has_session && *session_expires <= now &&
		!dl_session_still_live(session_id, session_expires))
		dl_session_expired_error(session_id);
	return now;
}

/*
 * try_acquire(lock_name text, owner text, ttl interval DEFAULT '30 seconds',
 *			   session_id uuid DEFAULT NULL, min_hold interval DEFAULT NULL)
 *		RETURNS bigint
 *
 * Take the lock for owner until now + ttl (NULL ttl: until released), bound
 * to session_id if given, and return its fencing token; NULL if another
 * owner holds it or it is within its minimum hold.  With min_hold, no other
 * owner gets the lock before acquired_at + min_hold, even after a release.
 * The holder calling again keeps its token and gets the new ttl, session
 * and min_hold.  A session_id that is not live raises 42704 or 55000.
 */
Datum
distlock_try_acquire(PG_FUNCTION_ARGS)
{
	text	   *name = dl_arg_name(fcinfo, 0, "lock name");
	text	   *owner = dl_arg_name(fcinfo, 1, "owner");
	Interval   *ttl = PG_ARGISNULL(2) ? NULL :
		dl_arg_interval(fcinfo, 2, "ttl", false);
	bool		has_session = !PG_ARGISNULL(3);
	Interval   *min_hold = PG_ARGISNULL(4) ? NULL :
		dl_arg_interval(fcinfo, 4, "min_hold", false);
	DistlockCall call;
	Datum		values[8];
	char		nulls[8] = "        ";
	bool		granted = false;
	int64		token = 0;
	TimestampTz session_expires = 0;

	values[0] = PointerGetDatum(name);
	values[1] = PointerGetDatum(owner);
	values[2] = has_session ? PG_GETARG_DATUM(3) : (Datum) 0;
	nulls[2] = has_session ? ' ' : 'n';
	values[6] = PointerGetDatum(min_hold);
	nulls[6] = min_hold ? ' ' : 'n';

	dl_enter(&call, "distlock.try_acquire()", true);
	values[5] = ObjectIdGetDatum(call.caller);
	dl_token_prepare();

	if (has_session)
		dl_session_use(&call, values[2], &session_expires);

	/*
	 * The shortcuts of the header comment: a released lock is granted in one
	 * statement (which, should the lock not be released, neither locks nor
	 * writes anything), and a lock held by another owner is refused on the
	 * committed row.
	 */
	{
		TimestampTz now = lease_grant_now(has_session, &session_expires,
										  values[2]);
		LeaseRow	row;

		values[3] = TimestampTzGetDatum(now);
		lease_expiry(ttl, now, &values[4], &nulls[4]);
		if (dl_exec(&grant_released_stmt, values, nulls, 0) == 1)
		{
			token = dl_getint64(0, 1);
			/* the statement may have waited for the row: still live? */
			(void) lease_grant_now(has_session, &session_expires, values[2]);
			dl_token_drawn(token);
			dl_leave(&call);
			PG_RETURN_INT64(token);
		}

		if (!IsolationUsesXactSnapshot() &&
			lease_lock_row(&peek_stmt, name, &row, NULL))
		{
			bool		isnull;
			Datum		holder = dl_getattr(0, LOCK_COL_HOLDER_EXPIRES, &isnull);
			bool		intact;

			now = GetCurrentTimestamp();
			intact = row.owner != NULL &&
				(!row.has_session ||
				 (!isnull && DatumGetTimestampTz(holder) > now));
			if (lease_blocks(&row, intact, now) &&
				!(intact && lease_owned_by(&row, owner) &&
				  dl_may_act_for(&call, row.created_by)))
			{
				dl_leave(&call);
				PG_RETURN_NULL();	/* held by another owner, or on hold */
			}
		}
	}

	for (;;)
	{
		LeaseRow	row;
		TimestampTz now;
		bool		intact;
		bool		reentry;

		if (!lease_lock_row(&lock_for_update_stmt, name, &row, NULL))
		{
			/* first grant ever; lose a race and we lock the winner's row */
			now = lease_grant_now(has_session, &session_expires, values[2]);
			values[3] = TimestampTzGetDatum(now);
			lease_expiry(ttl, now, &values[4], &nulls[4]);
			if (dl_exec(&insert_stmt, values, nulls, 0) == 1)
			{
				granted = true;
				token = dl_getint64(0, 1);
				(void) lease_grant_now(has_session, &session_expires,
									   values[2]);
				dl_token_drawn(token);
				break;
			}
			CHECK_FOR_INTERRUPTS();
			continue;
		}

		intact = lease_claim_intact(&row, true);
		now = GetCurrentTimestamp();
		/* an owner string is only good for the role that was granted it */
		reentry = intact && lease_owned_by(&row, owner) &&
			dl_may_act_for(&call, row.created_by);
		if (!reentry && lease_blocks(&row, intact, now))
			break;				/* held by another owner, or on hold */

		now = lease_grant_now(has_session, &session_expires, values[2]);
		values[3] = TimestampTzGetDatum(now);
		lease_expiry(ttl, now, &values[4], &nulls[4]);
		values[7] = BoolGetDatum(reentry);
		dl_exec(&grant_stmt, values, nulls, 0);
		granted = true;
		token = dl_getint64(0, 1);
		if (!reentry)
			dl_token_drawn(token);
		break;
	}
	dl_leave(&call);

	if (!granted)
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}

/*
 * Lock the row of name for its owner's renew or release: true if owner's
 * claim is intact, whether or not its time has run out.  A lock currently
 * granted to a role the caller may not act for raises 42501.
 */
static bool
lease_lock_own(DistlockCall *call, text *name, text *owner)
{
	LeaseRow	row;

	return lease_lock_row(&lock_for_update_stmt, name, &row, call) &&
		lease_owned_by(&row, owner) &&
		lease_claim_intact(&row, false);
}

/*
 * renew(lock_name text, owner text, ttl interval DEFAULT '30 seconds')
 *		RETURNS boolean
 *
 * Extend owner's lease to now + ttl (NULL: until released), keeping its
 * token.  A lease whose time ran out but that nobody else took may be
 * renewed.  False, changing nothing, once another owner has taken the lock,
 * after release, or once the lease's session has ended.
 */
Datum
distlock_renew(PG_FUNCTION_ARGS)
{
	text	   *name = dl_arg_name(fcinfo, 0, "lock name");
	text	   *owner = dl_arg_name(fcinfo, 1, "owner");
	Interval   *ttl = PG_ARGISNULL(2) ? NULL :
		dl_arg_interval(fcinfo, 2, "ttl", false);
	DistlockCall call;
	Datum		values[3];
	char		nulls[3] = "   ";
	bool		renewed;

	dl_enter(&call, "distlock.renew()", true);
	renewed = lease_lock_own(&call, name, owner);
	if (renewed)
	{
		TimestampTz now = GetCurrentTimestamp();

		values[0] = PointerGetDatum(name);
		values[1] = TimestampTzGetDatum(now);
		lease_expiry(ttl, now, &values[2], &nulls[2]);
		dl_exec(&renew_stmt, values, nulls, 0);
	}
	dl_leave(&call);

	PG_RETURN_BOOL(renewed);
}

/*
 * release(lock_name text, owner text) RETURNS boolean
 *
 * Free owner's lock.  True if owner's claim was intact and the lock is now
 * free; false, changing nothing, otherwise.  The row keeps its token, so the
 * next grant's token is larger.
 */
Datum
distlock_release(PG_FUNCTION_ARGS)
{
	text	   *name = dl_arg_name(fcinfo, 0, "lock name");
	text	   *owner = dl_arg_name(fcinfo, 1, "owner");
	DistlockCall call;
	Datum		values[3];
	bool		released;

	dl_enter(&call, "distlock.release()", true);
	values[0] = PointerGetDatum(name);
	values[1] = TimestampTzGetDatum(GetCurrentTimestamp());
	values[2] = PointerGetDatum(owner);
	if (dl_exec(&release_own_stmt, values, NULL, 0) == 1)
	{
		bool		isnull;

		/* another role's grant: the error undoes the update */
		dl_check_access(&call,
						DatumGetObjectId(dl_getattr(0, 1, &isnull)), DL_OBJECT_LOCK,
						text_to_cstring(name));
		released = true;
	}
	else
	{
		released = lease_lock_own(&call, name, owner);
		if (released)
		{
			values[1] = TimestampTzGetDatum(GetCurrentTimestamp());
			dl_exec(&release_stmt, values, NULL, 0);
		}
	}
	/* the first waiter in the lock's line may take it once we commit */
	if (released)
		dl_wake_at_commit(DL_WAIT_LEASE, dl_wait_key(values[0], false),
						  InvalidOid, 1);
	dl_leave(&call);

	PG_RETURN_BOOL(released);
}

/*
 * fence(lock_name text, token bigint) RETURNS void
 *
 * Raise 55000 unless token is the current token of a live lease on
 * lock_name (42501 if it is granted to a role the caller may not act
 * for).  On success the lock row
 * stays share-locked until the caller's transaction ends: another owner's
 * try_acquire waits for it, so writes made in this transaction after fence()
 * commit only while the lease is still this token's.
 */
Datum
distlock_fence(PG_FUNCTION_ARGS)
{
	text	   *name = dl_arg_name(fcinfo, 0, "lock name");
	DistlockCall call;
	LeaseRow	row;
	int64		token;
	char	   *cname;

	dl_arg_not_null(fcinfo, 1, "token");
	token = PG_GETARG_INT64(1);
	cname = text_to_cstring(name);

	dl_enter(&call, "distlock.fence()", true);
	/*
	 * No row: never acquired, or free long enough for maintain() to delete
	 * it.  The same refusal as for a released lock, so that the deletion
	 * changes nothing a fenced writer sees.
	 */
	if (!lease_lock_row(&lock_for_share_stmt, name, &row, &call))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("lock \"%s\" is not held with fencing token " INT64_FORMAT,
						cname, token),
				 errdetail("The lock has no lease.")));
	if (row.token != token)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("fencing token " INT64_FORMAT " of lock \"%s\" is stale",
						token, cname),
				 errdetail("The lock's current token is " INT64_FORMAT ".",
						   row.token)));
	if (!lease_claim_intact(&row, false))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("lock \"%s\" is no longer held with fencing token " INT64_FORMAT,
						cname, token),
				 errdetail("The lock was released or its session ended.")));
	if (row.has_expiry && row.expires_at <= GetCurrentTimestamp())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("lease on lock \"%s\" with fencing token " INT64_FORMAT " has expired",
						cname, token)));
	dl_leave(&call);

	PG_RETURN_VOID();
}
