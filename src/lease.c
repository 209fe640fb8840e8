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
 * with the same owner string.  To any other role a held lock is simply held,
 * and a lease is not its own: renew and release return false, fence raises
 * 55000, as for another owner.
 *
 * Concurrency: a call reads the lock row as last committed, without
 * locking it, and judges it: the holder's session too if the lease is bound
 * to one (on its committed row, ordered against its heartbeats by the beat
 * lock, without waiting and without keeping a lock: session.c), and only
 * then the clock.  A refusal (held by another owner or on hold for
 * try_acquire; not the caller's lease for renew, release and fence) ends
 * there: no row lock, no transaction id, no WAL, no commit to flush, and
 * no waiting for a transaction that holds the row, so a role can neither
 * stall nor be stalled by another role's lease it has no claim on.  A
 * lease the caller may change is then locked, in that very version
 * (tables.c: dl_version_lock()); should it have changed since the read,
 * nothing is locked and the call reads and judges it again.  So a call
 * locks only a version it judged it may win, never a version somebody
 * else changed meanwhile (FOR UPDATE at READ COMMITTED would lock the
 * latest version and keep the lock though the call then refuses it).
 *
 * Judging before locking is safe because, on an unchanged version, the
 * judgement can only move one way as time passes: a holder's claim that
 * has ended stays ended (a session judged dead, with no heartbeat in
 * flight, is dead for good; a contender counts one in flight as live), an
 * expiry or a minimum hold that has passed stays passed, and a lock that
 * was free stays free.  A grant is made at the instant read after the lock,
 * later than the judgement, so the lease it grants overlaps no earlier one;
 * two contenders are serialised on the row lock, and the second finds the
 * version changed and judges the first's grant.  Every token drawn is made
 * durable before it is returned, so no crash hands it out again, and
 * carries the timeline's epoch, so no failover does (token.c).
 *
 * The read sees the latest committed version at every isolation level, so
 * a refusal is the answer at an instant inside the call, and a contender
 * polling a held lock costs the server one read.  At REPEATABLE READ and
 * SERIALIZABLE, a version the transaction's snapshot does not see raises
 * 40001 before anything is decided, as FOR UPDATE would.
 *
 * The lock row is read by locks_pkey, and rewritten once locked, through
 * the table AM rather than by statements (lease_read(), lease_write(),
 * tables.c): a statement's executor start-up and shutdown cost more than
 * the read or the update, and these calls are made as often as holders and
 * contenders can make them.  The statements stay for what only the
 * executor applies and for REPEATABLE READ and SERIALIZABLE, and take the
 * same decisions on the same versions (test/sql/lease_paths.sql).
 *
 * fence() holds two locks until the caller's transaction ends: the name's
 * fence lock, a heavyweight lock (lease_fence_tag()), in ShareLock, and
 * the version of the row it judged, FOR KEY SHARE.  A grant to another
 * owner first waits for every transaction that holds the fence lock
 * (lease_wait_fences(), as WaitForLockers() waits, without joining the
 * lock's queue, so that no later fence waits behind it), and then locks
 * the version it judged FOR UPDATE, which conflicts with a key share lock.
 * So a fence that took the fence lock before the grant looked is waited
 * for; one that took it later meets the grant at the version, and
 * whichever locks it first is waited for by the other (a fence that waited
 * finds the version replaced, and the lease another owner's).  The
 * holder's renew, release and re-entry lock the row FOR NO KEY UPDATE,
 * which does not conflict with a key share lock, and never take the fence
 * lock, so a fencing transaction never holds up its own lease, nor the
 * holder's changes a fence.  The fence lock is what keeps a grant off the
 * versions they write after the fence: heap_update() carries a key share
 * locker over to the new version, but can drop one that arrives while the
 * update moves the row to another page.  (A grant could then find the
 * version the fence judged live unlocked, after such an update rolled
 * back, only if it had judged the same version takeable before the fence
 * took the fence lock: on a server clock that stepped back.)  fence()
 * judges the lease before each lock, so a refusal takes nothing, and again
 * once it holds the version, on the row and the holder's session read
 * again and a later clock reading (what a grant that did not wait for the
 * fence judged before it, the holder's view finds too); a refusal is an
 * error, which undoes the locks.  A grant waits for a fencing transaction
 * whole, even after a savepoint's rollback undid the fence.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/lease.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/sysattr.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/uuid.h"

#include "distlock.h"

PG_FUNCTION_INFO_V1(distlock_try_acquire);
PG_FUNCTION_INFO_V1(distlock_renew);
PG_FUNCTION_INFO_V1(distlock_release);
PG_FUNCTION_INFO_V1(distlock_fence);

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
 * A grant on the version $1, locked: re-entry ($8) keeps token and
 * acquired_at, and hold_until counts min_hold ($7) from that acquired_at.
 */
static DistlockStmt grant_stmt = {
	"UPDATE distlock.locks SET owner = $2, session_id = $3,"
	" token = CASE WHEN $8 THEN token ELSE nextval('distlock.token_seq') END,"
	" acquired_at = CASE WHEN $8 THEN acquired_at ELSE $4 END,"
	" renewed_at = $4, expires_at = $5,"
	" hold_until = CASE WHEN $8 THEN acquired_at ELSE $4 END + $7,"
	" created_by = $6"
	" WHERE ctid = $1 RETURNING token",
	8, {TIDOID, TEXTOID, UUIDOID, TIMESTAMPTZOID, TIMESTAMPTZOID, REGROLEOID,
	INTERVALOID, BOOLOID}
};

static DistlockStmt renew_stmt = {
	"UPDATE distlock.locks SET renewed_at = $2, expires_at = $3"
	" WHERE ctid = $1",
	3, {TIDOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
};

static DistlockStmt release_stmt = {
	"UPDATE distlock.locks SET owner = NULL, session_id = NULL,"
	" expires_at = NULL, renewed_at = $2"
	" WHERE ctid = $1",
	2, {TIDOID, TIMESTAMPTZOID}
};

/*
 * The fence lock of lock name: an advisory lock tag of distlock's own kind,
 * keyed by the name's digest (two names sharing a key only wait for each
 * other's fences).
 */
static void
lease_fence_tag(LOCKTAG *tag, text *name)
{
	uint64		key = dl_wait_key_of(DL_WAIT_LEASE, InvalidOid,
									 PointerGetDatum(name));

	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (key >> 32),
						 (uint32) key, DISTLOCK_TAG_FENCE);
}

/*
 * Set by acquire() around each of its tries (wait.c): the instant the
 * grant's waits for the fences and for the lock row end, all together, the
 * try refused, in place of the caller's lock_timeout (0: none).  The try's
 * try_acquire() takes it for itself, so nothing it runs sees it.
 */
TimestampTz dl_try_until = 0;

static void
lease_wait_fences_run(void *arg)
{
	WaitForLockers(*(LOCKTAG *) arg, ExclusiveLock, false);
}

/*
 * Wait until every other transaction that holds a fence of lock name now
 * has ended, before a grant to a new owner (see the header comment); false
 * if until (if not 0: dl_try_until) came first.
 */
static bool
lease_wait_fences(text *name, TimestampTz until)
{
	LOCKTAG		tag;

	lease_fence_tag(&tag, name);
	return dl_wait_bounded(lease_wait_fences_run, NULL, &tag, until);
}

/* The lock row as lease_read() read it. */
typedef struct LeaseRow
{
	ItemPointerData tid;		/* the version read */
	TransactionId xmin;			/* its raw xmin */
	text	   *owner;			/* NULL when released */
	bool		has_session;
	Datum		session_id;
	int64		token;
	bool		has_expiry;
	TimestampTz expires_at;
	bool		has_hold;
	TimestampTz hold_until;
	Oid			created_by;		/* role of the current (or last) grant */
	bool		has_holder_expiry;	/* the session exists */
	TimestampTz holder_expires;
} LeaseRow;

/* A nullable timestamptz column of the lock row in slot. */
static bool
lease_time(TupleTableSlot *slot, AttrNumber att, TimestampTz *value)
{
	bool		isnull;
	Datum		d = slot_getattr(slot, att, &isnull);

	*value = isnull ? 0 : DatumGetTimestampTz(d);
	return !isnull;
}

/*
 * Read the row of lock name into *row, as last committed and as this
 * transaction has changed it, by locks_pkey, and the expiry of its
 * holder's session, if it has one, by sessions_pkey under the same
 * snapshot (session.c); false if the name has no row.  Neither row is
 * locked (see the header comment).  At REPEATABLE READ and SERIALIZABLE a
 * version that the transaction's snapshot does not see raises 40001, as a
 * row lock would.
 */
static bool
lease_read(text *name, LeaseRow *row)
{
	const DistlockCatalog *cat = dl_catalog();
	TupleTableSlot *slot;
	LatestRead	lr;
	bool		isnull;
	Datum		d;

	dl_latest_open(&lr, cat->locks, AccessShareLock);
	dl_latest_scan(&lr, cat->locks_pkey, BTEqualStrategyNumber, F_TEXTEQ,
				   PointerGetDatum(name));
	if (!dl_latest_next(&lr))
	{
		dl_latest_close(&lr);
		return false;
	}
	slot = lr.slot;
	row->tid = slot->tts_tid;
	row->xmin = DatumGetTransactionId(slot_getsysattr(slot,
													  MinTransactionIdAttributeNumber,
													  &isnull));
	d = slot_getattr(slot, cat->lock_owner, &isnull);
	row->owner = isnull ? NULL : DatumGetTextPCopy(d);
	d = slot_getattr(slot, cat->lock_session_id, &isnull);
	row->has_session = !isnull;
	row->session_id = isnull ? (Datum) 0 : datumCopy(d, false, UUID_LEN);
	d = slot_getattr(slot, cat->lock_token, &isnull);
	if (isnull)
		elog(ERROR, "unexpected null token in distlock.locks");
	row->token = DatumGetInt64(d);
	row->has_expiry = lease_time(slot, cat->lock_expires_at, &row->expires_at);
	row->has_hold = lease_time(slot, cat->lock_hold_until, &row->hold_until);
	row->created_by = DatumGetObjectId(slot_getattr(slot, cat->lock_created_by,
													&isnull));

	/*
	 * The session as of the same instant: one read later could find the
	 * session closed after its lease moved to another session of the same
	 * owner, and refuse that owner's renewal of a lease that was its own
	 * all along.  What its heartbeats promised is read after the row.
	 */
	row->has_holder_expiry = row->has_session &&
		dl_session_expiry(row->session_id, &lr, &row->holder_expires);
	dl_latest_close(&lr);

	dl_version_check_visible(cat->locks, &row->tid, row->xmin);
	return true;
}

/*
 * Lock the version lease_read() read, in mode; false, locking nothing, if
 * it has changed since (the caller reads the row again).
 */
static bool
lease_lock(LeaseRow *row, LockTupleMode mode)
{
	return dl_version_lock(dl_catalog()->locks, &row->tid, row->xmin, mode);
}

/* A lease_lock() for dl_wait_bounded() to run. */
typedef struct LeaseLockTry
{
	LeaseRow   *row;
	LockTupleMode mode;
	bool		locked;
} LeaseLockTry;

static void
lease_lock_run(void *arg)
{
	LeaseLockTry *lt = (LeaseLockTry *) arg;

	lt->locked = lease_lock(lt->row, lt->mode);
}

/* What lease_lock_grant() did. */
typedef enum LeaseLocked
{
	LEASE_CHANGED,				/* nothing: the version changed */
	LEASE_LOCKED,
	LEASE_TIMED_OUT				/* nothing: dl_try_until came first */
} LeaseLocked;

/*
 * lease_lock() for a grant, its wait bounded by until if not 0
 * (dl_try_until).  The lock is then taken in a subtransaction, and so is
 * the subtransaction's; the grant that follows is the transaction's own.
 */
static LeaseLocked
lease_lock_grant(LeaseRow *row, LockTupleMode mode, TimestampTz until)
{
	LeaseLockTry lt = {row, mode, false};

	if (!dl_wait_bounded(lease_lock_run, NULL, &lt, until))
		return LEASE_TIMED_OUT;
	return lt.locked ? LEASE_LOCKED : LEASE_CHANGED;
}

/* How lease_write() changes a locked lock row. */
typedef enum LeaseChange
{
	LEASE_GRANT,				/* grant_stmt */
	LEASE_RENEW,				/* renew_stmt */
	LEASE_RELEASE				/* release_stmt */
} LeaseChange;

static DistlockStmt *const lease_stmts[] = {
	&grant_stmt, &renew_stmt, &release_stmt
};

/*
 * Make change to the version of the lock row that lease_lock() locked,
 * with the parameters of its statement in values and nulls (values[0], the
 * version, is set here); returns the row's token afterwards.  Through the
 * table AM where tables.c allows it, as lease_read() reads: the statement
 * is the path for what only the executor applies (a trigger on the table,
 * say) and for REPEATABLE READ and SERIALIZABLE.  Both write the same row:
 * a column a statement does not set keeps the version's value, and the
 * grant draws a new token from token_seq, with nextval(), unless it is a
 * re-entry.
 */
static int64
lease_write(LeaseRow *row, LeaseChange change, Datum *values,
			const char *nulls)
{
	const DistlockCatalog *cat = dl_catalog();
	AttrNumber	updated[8];
	int			nupdated = 0;
	AttrNumber	nullable[4];
	RowUpdate	ru;
	bool		isnull;
	int64		token;

	values[0] = PointerGetDatum(&row->tid);
	if (change != LEASE_RENEW)
	{
		updated[nupdated++] = cat->lock_owner;
		updated[nupdated++] = cat->lock_session_id;
	}
	if (change == LEASE_GRANT)
	{
		updated[nupdated++] = cat->lock_token;
		updated[nupdated++] = cat->lock_acquired_at;
		updated[nupdated++] = cat->lock_hold_until;
		updated[nupdated++] = cat->lock_created_by;
	}
	updated[nupdated++] = cat->lock_renewed_at;
	updated[nupdated++] = cat->lock_expires_at;

	/* the columns grant_stmt, renew_stmt or release_stmt may set to NULL */
	nullable[0] = cat->lock_owner;
	nullable[1] = cat->lock_session_id;
	nullable[2] = cat->lock_expires_at;
	nullable[3] = cat->lock_hold_until;

	if (!dl_row_update_begin(&ru, cat->locks, &row->tid, updated, nupdated,
							 nullable, lengthof(nullable)))
	{
		DistlockStmt *stmt = lease_stmts[change];

		if (dl_exec(stmt, values, nulls, 0) != 1)
			elog(ERROR, "locked row of a lock not found");
		return change == LEASE_GRANT ? dl_getint64(0, 1) : row->token;
	}

	token = DatumGetInt64(slot_getattr(ru.old, cat->lock_token, &isnull));
	switch (change)
	{
		case LEASE_GRANT:
			{
				bool		reentry = DatumGetBool(values[7]);
				Datum		acquired = values[3];

				/* a re-entry keeps token and acquired_at */
				if (reentry)
					acquired = slot_getattr(ru.old, cat->lock_acquired_at,
											&isnull);
				else
					token = nextval_internal(cat->token_seq, true);
				dl_row_update_set(&ru, cat->lock_owner, values[1], false);
				dl_row_update_set(&ru, cat->lock_session_id, values[2],
								  nulls[2] == 'n');
				dl_row_update_set(&ru, cat->lock_token, Int64GetDatum(token),
								  false);
				dl_row_update_set(&ru, cat->lock_acquired_at, acquired, false);
				dl_row_update_set(&ru, cat->lock_renewed_at, values[3], false);
				dl_row_update_set(&ru, cat->lock_expires_at, values[4],
								  nulls[4] == 'n');
				/* min_hold counts from acquired_at */
				dl_row_update_set(&ru, cat->lock_hold_until,
								  nulls[6] == 'n' ? (Datum) 0 :
								  TimestampTzGetDatum(dl_add_interval(DatumGetTimestampTz(acquired),
																	  DatumGetIntervalP(values[6]))),
								  nulls[6] == 'n');
				dl_row_update_set(&ru, cat->lock_created_by, values[5], false);
				break;
			}
		case LEASE_RENEW:
			dl_row_update_set(&ru, cat->lock_renewed_at, values[1], false);
			dl_row_update_set(&ru, cat->lock_expires_at, values[2],
							  nulls[2] == 'n');
			break;
		case LEASE_RELEASE:
			dl_row_update_set(&ru, cat->lock_owner, (Datum) 0, true);
			dl_row_update_set(&ru, cat->lock_session_id, (Datum) 0, true);
			dl_row_update_set(&ru, cat->lock_expires_at, (Datum) 0, true);
			dl_row_update_set(&ru, cat->lock_renewed_at, values[1], false);
			break;
	}
	dl_row_update_end(&ru);
	return token;
}

/*
 * Whether the holder's claim on the row is intact: it has an owner and, if
 * bound to a session, the session is live.  contender: the answer is for
 * somebody who would take the lock if not, so a session whose heartbeat is
 * in flight counts as live; for the holder's own renew, release and fence
 * it counts as ended (session.c: dl_session_is_live()).  Either way "ended"
 * is final.  A session found live by the read needs no second look.
 */
static bool
lease_claim_intact(LeaseRow *row, bool contender)
{
	if (row->owner == NULL)
		return false;
	if (!row->has_session)
		return true;
	if (row->has_holder_expiry && row->holder_expires > GetCurrentTimestamp())
		return true;
	return dl_session_is_live(row->session_id, contender);
}

/*
 * Whether a row keeps other owners out at now: its minimum hold has not
 * passed, or its holder's claim (intact, as lease_claim_intact() found)
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

/*
 * Whether the row is owner's lease granted to a role the caller may act
 * for: an owner string is only good for the role that was granted it.
 */
static bool
lease_is_callers(DistlockCall *call, LeaseRow *row, text *owner)
{
	return lease_owned_by(row, owner) &&
		dl_may_act_for(call, row->created_by);
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
 * so it has not been closed or reaped).  Called again after the first
 * grant's insert, which may have waited for a concurrent insert of the
 * name; its error undoes the grant.
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
	TimestampTz until = dl_try_until;

	dl_try_until = 0;

	/* insert_stmt's parameters; grant_stmt's but for $1, the version */
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

	for (;;)
	{
		LeaseRow	row;
		TimestampTz now;
		bool		intact;
		bool		reentry;
		LeaseLocked locked;

		if (!lease_read(name, &row))
		{
			/*
			 * First grant ever; lose a race and we read the winner's row.  A
			 * fence may outlive the row (drop_owned() deleted it): wait for
			 * it before anything the grant is made of is read.
			 */
			if (!lease_wait_fences(name, until))
				break;			/* acquire()'s try ran out of time */
			dl_limit_count_locks(call.caller, PointerGetDatum(name));
			now = lease_grant_now(has_session, &session_expires, values[2]);
			values[3] = TimestampTzGetDatum(now);
			lease_expiry(ttl, now, &values[4], &nulls[4]);
			values[0] = PointerGetDatum(name);
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
		reentry = intact && lease_is_callers(&call, &row, owner);
		if (!reentry && lease_blocks(&row, intact, now))
			break;				/* held by another owner, or on hold */

		/*
		 * Ours to take: lock the version judged, or judge the new one.  A
		 * new owner waits for the fences first, and locks FOR UPDATE; the
		 * holder re-entering, FOR NO KEY UPDATE (header comment).
		 */
		if (!reentry && !lease_wait_fences(name, until))
			break;				/* acquire()'s try ran out of time */
		locked = lease_lock_grant(&row, reentry ? LockTupleNoKeyExclusive :
								  LockTupleExclusive, until);
		if (locked == LEASE_TIMED_OUT)
			break;
		if (locked == LEASE_CHANGED)
		{
			CHECK_FOR_INTERRUPTS();
			continue;
		}

		now = lease_grant_now(has_session, &session_expires, values[2]);
		values[3] = TimestampTzGetDatum(now);
		lease_expiry(ttl, now, &values[4], &nulls[4]);
		values[7] = BoolGetDatum(reentry);
		token = lease_write(&row, LEASE_GRANT, values, nulls);
		granted = true;
		if (!reentry)
		{
			/* a sequence set back (by hand, or a restore that lost it) */
			if (token <= row.token)
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("fencing token " INT64_FORMAT " of lock \"%s\" is not above its last token " INT64_FORMAT,
								token, text_to_cstring(name), row.token),
						 errhint("distlock.token_seq was set back; set it above every token handed out.")));
			dl_token_drawn(token);
		}
		break;
	}
	dl_leave(&call);

	if (!granted)
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}

/*
 * Lock the row of name for its owner's renew or release, into *row: true
 * if it is owner's lease, granted to a role the caller may act for, and
 * owner's claim is intact, whether or not its time has run out.  Anything
 * else is not the caller's to change, and is left unlocked.
 */
static bool
lease_lock_own(DistlockCall *call, text *name, text *owner, LeaseRow *row)
{
	for (;;)
	{
		if (!lease_read(name, row) ||
			!lease_is_callers(call, row, owner) ||
			!lease_claim_intact(row, false))
			return false;
		if (lease_lock(row, LockTupleNoKeyExclusive))
			return true;
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * renew(lock_name text, owner text, ttl interval DEFAULT '30 seconds')
 *		RETURNS boolean
 *
 * Extend owner's lease to now + ttl (NULL: until released), keeping its
 * token.  A lease whose time ran out but that nobody else took may be
 * renewed.  False, changing nothing, once another owner (or another role)
 * has taken the lock, after release, or once the lease's session has ended.
 */
Datum
distlock_renew(PG_FUNCTION_ARGS)
{
	text	   *name = dl_arg_name(fcinfo, 0, "lock name");
	text	   *owner = dl_arg_name(fcinfo, 1, "owner");
	Interval   *ttl = PG_ARGISNULL(2) ? NULL :
		dl_arg_interval(fcinfo, 2, "ttl", false);
	DistlockCall call;
	LeaseRow	row;
	Datum		values[3];
	char		nulls[3] = "   ";
	bool		renewed;

	dl_enter(&call, "distlock.renew()", true);
	renewed = lease_lock_own(&call, name, owner, &row);
	if (renewed)
	{
		TimestampTz now = GetCurrentTimestamp();

		values[1] = TimestampTzGetDatum(now);
		lease_expiry(ttl, now, &values[2], &nulls[2]);
		(void) lease_write(&row, LEASE_RENEW, values, nulls);
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
	LeaseRow	row;
	Datum		values[2];
	bool		released;

	dl_enter(&call, "distlock.release()", true);
	released = lease_lock_own(&call, name, owner, &row);
	if (released)
	{
		values[1] = TimestampTzGetDatum(GetCurrentTimestamp());
		(void) lease_write(&row, LEASE_RELEASE, values, "  ");
		/* the first waiter in the lock's line may take it once we commit */
		dl_wake_at_commit(DL_WAIT_LEASE, InvalidOid, PointerGetDatum(name), 1);
	}
	dl_leave(&call);

	PG_RETURN_BOOL(released);
}

/*
 * Raise 55000 unless row (NULL: none) holds token as a live lease that the
 * caller may act for.  To a role that may not, another role's lease is
 * one it does not hold, whatever its token: nothing about it is told.
 */
static void
lease_check_fence(DistlockCall *call, LeaseRow *row, const char *cname,
				  int64 token)
{
	/*
	 * No row: never acquired, or free long enough for maintain() to delete
	 * it.  The same refusal as for a released lock, so that the deletion
	 * changes nothing a fenced writer sees.
	 */
	if (row == NULL || !dl_may_act_for(call, row->created_by))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("lock \"%s\" is not held with fencing token " INT64_FORMAT,
						cname, token),
				 row ? 0 : errdetail("The lock has no lease.")));
	if (row->token != token)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("fencing token " INT64_FORMAT " of lock \"%s\" is stale",
						token, cname),
				 errdetail("The lock's current token is " INT64_FORMAT ".",
						   row->token)));
	if (!lease_claim_intact(row, false))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("lock \"%s\" is no longer held with fencing token " INT64_FORMAT,
						cname, token),
				 errdetail("The lock was released or its session ended.")));
	if (row->has_expiry && row->expires_at <= GetCurrentTimestamp())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("lease on lock \"%s\" with fencing token " INT64_FORMAT " has expired",
						cname, token)));
}

/*
 * fence(lock_name text, token bigint) RETURNS void
 *
 * Raise 55000 unless token is the current token of a live lease on
 * lock_name, granted to a role the caller may act for.  On success the
 * name's fence lock is held until the caller's transaction ends: another
 * owner's try_acquire waits for it, so writes made in this transaction
 * after fence() commit only while the lease is still this token's; the
 * holder's renew and release do not wait.  The lease is judged before the
 * locks are taken, so a refusal takes nothing, and again once they are, on
 * the clock read after them.
 */
Datum
distlock_fence(PG_FUNCTION_ARGS)
{
	text	   *name = dl_arg_name(fcinfo, 0, "lock name");
	DistlockCall call;
	LeaseRow	row;
	bool		found;
	bool		fenced = false;
	LOCKTAG		tag;
	int64		token;
	char	   *cname;

	dl_arg_not_null(fcinfo, 1, "token");
	token = PG_GETARG_INT64(1);
	cname = text_to_cstring(name);

	dl_enter(&call, "distlock.fence()", true);
	lease_fence_tag(&tag, name);
	for (;;)
	{
		found = lease_read(name, &row);
		lease_check_fence(&call, found ? &row : NULL, cname, token);
		if (!fenced)
			(void) LockAcquire(&tag, ShareLock, false, false);
		fenced = true;
		if (lease_lock(&row, LockTupleKeyShare))
			break;
		CHECK_FOR_INTERRUPTS();
	}

	/*
	 * Judge again on a later clock, and on the row and the holder's session
	 * read again: the session may have been closed since it was read, and
	 * a grant to another owner that found it closed may have waited for
	 * the fences before we took the fence lock (header comment).
	 */
	found = lease_read(name, &row);
	lease_check_fence(&call, found ? &row : NULL, cname, token);
	dl_leave(&call);

	PG_RETURN_VOID();
}
