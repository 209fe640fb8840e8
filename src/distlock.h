/*-------------------------------------------------------------------------
 *
 * distlock.h
 *		Declarations shared by the distlock source files.
 *
 * The locking protocol every file follows
 * ---------------------------------------
 * distlock's state lives in four tables: distlock.sessions, distlock.locks,
 * distlock.jobs and distlock.throttles.  A decision that depends on whether
 * a lease or a session is still live, or on how many permits a throttle has
 * left, is made in this order:
 *
 *	1. lock the row the decision is about,
 *	2. read the server clock (GetCurrentTimestamp()),
 *	3. decide, and write.
 *
 * Reading the clock only after the row lock is granted means that whoever
 * waited for the lock decides on the state its predecessor committed and on
 * a later instant, so decisions on one row are ordered the same way in
 * server time as in commit order.  Deciding on a clock reading taken before
 * a lock wait is the bug this avoids (a heartbeat could revive a session
 * that a contender had already judged dead).
 *
 * A session acting for itself (claim, complete, complete_and_claim, fail,
 * an acquire bound to it) must not be reaped or closed under the call, but
 * its heartbeat may go on.  It holds the session's use lock, a heavyweight
 * lock on the session's id (session.c), in ShareLock until its transaction
 * ends, and reads the session row under it without a row lock; at
 * REPEATABLE READ and SERIALIZABLE, and to check a session that seemed
 * expired, it also locks the row FOR KEY SHARE.  session_close takes the
 * use lock in ExclusiveLock, so it waits for such calls; reap takes it only
 * if it can at once, so it skips sessions in use.  Unlike a row lock, the
 * use lock writes no WAL and dirties no page, and a heartbeat of a session
 * with calls in flight creates no MultiXact.
 *
 * Row lock modes on a session row:
 *	FOR KEY SHARE		the session itself acting, at REPEATABLE READ or
 *						SERIALIZABLE, or checking that it has expired;
 *						renew and release judging their own lease's session.
 *	FOR SHARE			somebody judging whether another session is live
 *						(a lock contender, fence): conflicts with heartbeat.
 *	FOR NO KEY UPDATE	heartbeat.
 *	FOR UPDATE			session_close, reap: the row is deleted.
 *
 * Lock order, which keeps every path deadlock-free: the caller's own
 * session (its use lock, then its row), then a lock or job row, then the
 * lock holder's session row.  session_close takes the use lock and then
 * the row.  reap() takes a session row and then its job rows, and never a
 * lock row: a dead session's locks are free by definition, so nothing
 * needs to touch them; it never waits for a use lock (it asks without
 * waiting), so it can close no cycle with a call that holds one.
 * throttle() locks one throttle row and nothing else; it may also refuse
 * without locking anything, on the argument given in throttle.c.
 *
 * Shortcuts, each argued where it is made: try_acquire()'s refusal of a
 * lock held by another owner, decided without any lock, and throttle()'s
 * refusal (throttle.c); a refusal without a lock answers as a locked
 * decision would have at the instant of the snapshot it read, which lies
 * inside the call, and is taken only at READ COMMITTED, where that is so.
 * try_acquire()'s grant of a released lock and release() of an unbound
 * lease are single UPDATEs whose condition is rechecked under the row lock
 * and cannot turn false as time passes, so no clock reading is needed after
 * the lock (lease.c).
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/distlock.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef DISTLOCK_H
#define DISTLOCK_H

#include "executor/spi.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

/*
 * Names (of locks and throttles), owners, queues and dedup keys are 1 to
 * this many characters.
 */
#define DISTLOCK_MAX_NAME_CHARS		255

/* claim() hands out at most this many jobs per call. */
#define DISTLOCK_MAX_CLAIM_JOBS		1000

/* enqueue()'s max_attempts may not exceed this. */
#define DISTLOCK_MAX_ATTEMPTS		1000

/* throttle()'s burst may not exceed this. */
#define DISTLOCK_MAX_BURST			1000000

/* No ttl or retry delay may exceed one year. */
#define DISTLOCK_MAX_INTERVAL_USECS	(INT64CONST(366) * USECS_PER_DAY)

/* reap() works through expired sessions in batches of this many. */
#define DISTLOCK_REAP_BATCH			100

/*
 * A statement distlock runs through SPI.  The plan is prepared on first use
 * and kept for the life of the backend.
 */
typedef struct DistlockStmt
{
	const char *sql;
	int			nargs;
	Oid			argtypes[8];
	SPIPlanPtr	plan;
} DistlockStmt;

/* What dl_enter() saved, restored by dl_leave(). */
typedef struct DistlockCall
{
	Oid			caller;			/* the role calling the API */
	Oid			save_userid;
	int			save_sec_context;
} DistlockCall;

/* exec.c */
extern void dl_enter(DistlockCall *call, const char *fname, bool writes);
extern void dl_leave(DistlockCall *call);
extern uint64 dl_exec(DistlockStmt *stmt, Datum *values, const char *nulls,
					  long count);
extern Datum dl_getattr(int row, int col, bool *isnull);
extern int64 dl_getint64(int row, int col);

/* direct.c */
extern bool dl_claim_direct(DistlockCall *call, Datum queue, Datum session_id,
							int32 max_jobs, TimestampTz now,
							Tuplestorestate *store, uint64 *claimed);
extern bool dl_complete_direct(Datum job_id, Datum session_id, Datum result,
							   bool result_isnull, TimestampTz now, bool *done,
							   text **queue);
extern bool dl_session_read(Datum session_id, TimestampTz *expires,
							Oid *creator, bool *others_expired);

/* check.c */
extern text *dl_arg_name(FunctionCallInfo fcinfo, int argno, const char *what);
extern text *dl_arg_optional_name(FunctionCallInfo fcinfo, int argno,
								  const char *what);
extern Interval *dl_arg_interval(FunctionCallInfo fcinfo, int argno,
								 const char *what, bool allow_zero);
extern void dl_arg_not_null(FunctionCallInfo fcinfo, int argno,
							const char *what);
extern int32 dl_arg_int_range(FunctionCallInfo fcinfo, int argno,
							  const char *what, int32 min, int32 max);
extern int64 dl_interval_usecs(const Interval *span);
extern TimestampTz dl_add_interval(TimestampTz ts, Interval *span);

/* access.c */
extern bool dl_may_act_for(DistlockCall *call, Oid creator);
extern void dl_check_access(DistlockCall *call, Oid creator, const char *kind,
							const char *name);

/* session.c */
extern bool dl_session_use(DistlockCall *call, Datum session_id);
extern bool dl_session_is_live(Datum session_id, bool share);
extern bool dl_session_acting(DistlockCall *call, Datum session_id);
extern void dl_check_session_access(DistlockCall *call, Oid creator,
									Datum session_id);
extern int	dl_reap_expired(TimestampTz now, int limit);

#endif							/* DISTLOCK_H */
