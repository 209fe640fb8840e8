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
 * that a contender had already judged dead).  Lease calls judge first and
 * then lock exactly the version they judged, reading it again should it
 * have changed, and read the clock of a grant after the lock: on an
 * unchanged version no judgement can turn as time passes, and nothing is
 * locked for a refusal (lease.c).
 *
 * A session acting for itself (claim, complete, complete_and_claim, fail,
 * an acquire bound to it) must not be reaped or closed under the call, but
 * its heartbeat may go on.  It holds the session's use lock, a heavyweight
 * lock on the session's id (session.c), in ShareLock until its transaction
 * ends, and reads the session row under it without a row lock (at
 * REPEATABLE READ and SERIALIZABLE it also locks the row FOR KEY SHARE,
 * which does not conflict with a heartbeat).  session_close takes the use
 * lock in ExclusiveLock, so it waits for such calls; reap takes it only if
 * it can at once, so it skips sessions in use, and never reaps a session
 * its own transaction acts for.  A heartbeat holds the session's beat lock
 * in ExclusiveLock until its transaction ends; whoever judges a session
 * that has expired on its committed row (a lock contender, fence, renew,
 * release, a call of the session itself) takes the beat lock in ShareLock
 * without waiting and lets it go at once, so a judgement never waits for a
 * heartbeat and never blocks one (session.c says what a busy beat lock
 * means to each).  Unlike a row lock, neither lock writes WAL or dirties a
 * page, and a heartbeat of a session with calls in flight creates no
 * MultiXact.
 *
 * Row lock modes on a session row:
 *	FOR KEY SHARE		the session itself acting, at REPEATABLE READ or
 *						SERIALIZABLE.
 *	FOR NO KEY UPDATE	heartbeat, of a session it found live, when it
 *						writes the row.  With shared memory (beat.c) a
 *						heartbeat mostly writes nothing: it then holds
 *						the session's use lock in ShareLock instead, taken
 *						only if it can be at once, so that a close waits
 *						for it and a reap skips the session as for any
 *						call of the session in flight.
 *	FOR UPDATE			session_close, reap: the row is deleted.
 *
 * What waits for what.  A call waits only for: the lock row it may win
 * or the job row it decides on (held by another call on the same lock or
 * job, until that transaction ends); the use lock, in session_close (for the session's
 * calls in flight) and in a call of a session being closed (for the
 * close); the beat lock, in heartbeat (for a heartbeat of the same session,
 * or a judgement that holds it for an instant); a session row, in
 * heartbeat, session_close and, at REPEATABLE READ and SERIALIZABLE, a
 * session's own calls (for a close in flight, or a reaper that has locked
 * the expired row: a reaper locks only the version it read expired, never
 * a row a heartbeat has extended since); and the job rows of a session
 * being closed.  Reaping and judging never wait.  No call waits
 * while holding what a call it could be waiting for needs, so transactions
 * that make one distlock call each never deadlock.  A transaction that
 * makes several calls holds the locks of the earlier ones while a later
 * one waits, and can deadlock with another such transaction like any two
 * transactions that lock rows in different orders (heartbeat(S) and then
 * renew of a lock another transaction holds while it closes S, say);
 * PostgreSQL then cancels one of them with 40P01.  heartbeat(S) followed by
 * renew, fence or try_acquire in one transaction no longer deadlocks with
 * a contender judging S, since judging S never waits.
 * reap() takes a session row and then its job rows, skipping any that are
 * held, and never a lock row: a dead session's locks are free by
 * definition.  throttle() locks one throttle row and, on a name's first
 * use, its owner's limit lock (limits.c); it may also refuse without
 * locking anything, on the argument given in throttle.c.
 *
 * Shortcuts, each argued where it is made: try_acquire()'s refusal of a
 * lock held by another owner, decided without any lock, and throttle()'s
 * refusal (throttle.c); a refusal without a lock answers as a locked
 * decision would have at the instant of the snapshot it read, which lies
 * inside the call: try_acquire()'s is taken only at READ COMMITTED, where
 * that is so, throttle()'s at every level, since no version committed
 * after an older snapshot can have a permit where the one read had none.
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

#include "access/genam.h"
#include "access/tableam.h"
#include "executor/spi.h"
#include "nodes/execnodes.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
#include "utils/uuid.h"

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

/*
 * The kinds of distlock's own advisory lock tags (their objsubid): a
 * session's use and beat locks (session.c), the line of a lock's waiters
 * (wait.c), a role's count of its rows (limits.c) and a lock's fences
 * (lease.c).
 */
#define DISTLOCK_TAG_USE			0x4401
#define DISTLOCK_TAG_BEAT			0x4402
#define DISTLOCK_TAG_LINE			0x4403
#define DISTLOCK_TAG_LIMIT			0x4404
#define DISTLOCK_TAG_FENCE			0x4405

/* maintain() deletes at most this many rows of each table per pass. */
#define DISTLOCK_PRUNE_BATCH		1000

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
	Oid			argtypes[9];
	SPIPlanPtr	plan;
} DistlockStmt;

/* What dl_enter() saved, restored by dl_leave(). */
typedef struct DistlockCall
{
	Oid			caller;			/* the role calling the API */
	Oid			save_userid;
	int			save_sec_context;
	int			save_nestlevel; /* of the search_path setting */
} DistlockCall;

/* distlock's catalog entries (catalog.c) */
typedef struct DistlockCatalog
{
	Oid			schema;
	Oid			schema_owner;	/* the role distlock's statements run as */
	Oid			jobs;
	Oid			jobs_pkey;
	Oid			jobs_claim_idx;
	Oid			jobs_running_session_idx;
	Oid			sessions;
	Oid			sessions_pkey;
	Oid			sessions_expires_at_idx;
	Oid			locks;
	Oid			locks_pkey;
	Oid			locks_created_by_idx;
	Oid			token_seq;
	Oid			jobs_pending_fn;	/* the trigger function (position.c) */
	/* attribute numbers of distlock.jobs */
	AttrNumber	job_id;
	AttrNumber	job_queue;
	AttrNumber	job_status;
	AttrNumber	job_priority;
	AttrNumber	job_run_at;
	AttrNumber	job_attempts;
	AttrNumber	job_session_id;
	AttrNumber	job_claimed_at;
	AttrNumber	job_finished_at;
	AttrNumber	job_result;
	AttrNumber	job_created_by;
	AttrNumber	job_queue_owner;
	/* attribute numbers of distlock.locks */
	AttrNumber	lock_name;
	AttrNumber	lock_owner;
	AttrNumber	lock_session_id;
	AttrNumber	lock_token;
	AttrNumber	lock_acquired_at;
	AttrNumber	lock_renewed_at;
	AttrNumber	lock_expires_at;
	AttrNumber	lock_hold_until;
	AttrNumber	lock_created_by;
	/* attribute numbers of distlock.sessions */
	AttrNumber	session_id;
	AttrNumber	session_expires_at;
	AttrNumber	session_created_by;
	AttrNumber	session_ttl;
	/* distlock.job_status and its values */
	Oid			status_type;
	Oid			status_pending;
	Oid			status_running;
	Oid			status_completed;
} DistlockCatalog;

/* limits.c */
typedef enum DistlockLimit
{
	DL_LIMIT_SESSIONS,
	DL_LIMIT_THROTTLES,
	DL_LIMIT_PAYLOAD,
	DL_LIMIT_LOCKS,
	DL_LIMIT_GRANTS
} DistlockLimit;

/* Sizes up to this are never checked; no payload limit may be below it. */
#define DISTLOCK_MIN_PAYLOAD		1024

extern void dl_limit_lock(DistlockLimit which, Oid role);
extern void dl_limit_count(DistlockLimit which, Oid role);
extern bool dl_limit_full(DistlockLimit which, Oid role, int32 *limit);
extern void dl_limit_refuse(DistlockLimit which, Oid role, int32 limit);
extern void dl_limit_count_locks(Oid role, Datum name);
extern void dl_limit_after_move(DistlockLimit which, Oid role);
extern void dl_limit_size(Datum value, const char *what, Oid role);

/* advisory.c */
extern uint64 dl_sha256_key(const uint8 *data, size_t len);

/* catalog.c */
extern const DistlockCatalog *dl_catalog(void);
extern void dl_catalog_after_lock(void);

/* distlock.c */
extern bool dl_direct_path;
extern bool dl_background_maintenance(void);

/* exec.c */
extern void dl_enter(DistlockCall *call, const char *fname, bool writes);
extern void dl_leave(DistlockCall *call);
extern uint64 dl_exec(DistlockStmt *stmt, Datum *values, const char *nulls,
					  long count);
extern uint64 dl_exec_read(DistlockStmt *stmt, Datum *values,
						   const char *nulls);
extern uint64 dl_exec_latest(DistlockStmt *stmt, Datum *values,
							 const char *nulls);
extern uint64 dl_exec_latest_read(DistlockStmt *stmt, Datum *values,
								  const char *nulls);
extern bool dl_subxact(bool (*fn) (void *),
					   bool (*caught) (void *, ErrorData *), void *arg);
extern bool dl_wait_bounded(void (*fn) (void *), void (*undo) (void *),
							void *arg, TimestampTz until);
extern Datum dl_getattr(int row, int col, bool *isnull);
extern int64 dl_getint64(int row, int col);

/* lease.c */
extern PGDLLIMPORT TimestampTz dl_try_until;

/* A job's place in its priority group of jobs_claim_idx (position.c). */
typedef struct DlJobPos
{
	TimestampTz run_at;
	int64		id;
} DlJobPos;

/* tables.c: distlock.jobs opened for direct updates */
typedef struct JobsTable
{
	const DistlockCatalog *cat;
	Relation	rel;
	EState	   *estate;
	ResultRelInfo *result_rel;
	CommandId	cid;
	TupleTableSlot *old;		/* a version read */
	TupleTableSlot *locked;		/* the same version, once locked */
	TupleTableSlot *new;		/* the version written */
	bool		positions;		/* claim positions may be used */
} JobsTable;

extern bool dl_table_plain(Oid relid);
extern bool dl_jobs_open(JobsTable *jt, const AttrNumber *updated,
						 int nupdated);
extern void dl_jobs_close(JobsTable *jt);
extern IndexScanDesc dl_jobs_scan(JobsTable *jt, Relation index,
								  RegProcedure eq, Datum value);
extern IndexScanDesc dl_jobs_scan_queue(JobsTable *jt, Relation index,
									   Oid owner, Datum queue,
									   const int32 *priority,
									   const DlJobPos *from);
extern bool dl_jobs_next(IndexScanDesc scan, TupleTableSlot *slot,
						 DlJobPos *walked);
extern bool dl_jobs_next_group(JobsTable *jt, Relation index, Oid owner,
							   Datum queue, bool after, int32 prev,
							   int32 *priority);
extern void dl_jobs_scan_end(IndexScanDesc scan);
extern void dl_jobs_new_from_old(JobsTable *jt);
extern void dl_jobs_set(JobsTable *jt, AttrNumber att, Datum value,
						bool isnull);
typedef enum DlLockResult
{
	DL_LOCKED,					/* ours now */
	DL_LOCK_HELD,				/* another transaction holds it, lock only */
	DL_LOCK_CHANGED				/* changed, or being changed, by another */
} DlLockResult;

extern DlLockResult dl_jobs_lock_or_skip(JobsTable *jt, Snapshot snapshot);
extern TM_Result dl_jobs_update(JobsTable *jt, Snapshot snapshot, bool wait);
extern TM_Result dl_jobs_delete(JobsTable *jt, Snapshot snapshot, bool wait);
extern IndexScanDesc dl_index_scan(Relation heap, Relation index,
								   Snapshot snapshot, StrategyNumber strategy,
								   RegProcedure proc, Datum value);

/*
 * tables.c: one of distlock's tables read as committed now, and as this
 * transaction has changed it so far, through one index scan at a time.
 */
typedef struct LatestRead
{
	Relation	rel;
	Snapshot	snapshot;
	TupleTableSlot *slot;		/* the row dl_latest_next() found */
	Relation	index;			/* of the scan in progress, or NULL */
	IndexScanDesc scan;
} LatestRead;

extern void dl_latest_open(LatestRead *lr, Oid relid, LOCKMODE lockmode);
extern void dl_latest_open_as(LatestRead *lr, Oid relid, LOCKMODE lockmode,
							  const LatestRead *other);
extern void dl_latest_scan(LatestRead *lr, Oid indexid,
						   StrategyNumber strategy, RegProcedure proc,
						   Datum value);
extern bool dl_latest_next(LatestRead *lr);
extern void dl_latest_close(LatestRead *lr);
extern void dl_version_check_visible(Oid relid, ItemPointer tid,
									 TransactionId xmin);
extern bool dl_version_lock(Oid relid, ItemPointer tid, TransactionId xmin,
							LockTupleMode mode);

/* tables.c: a version this transaction has locked, rewritten directly */
typedef struct RowUpdate
{
	Relation	rel;
	Snapshot	snapshot;
	EState	   *estate;
	ResultRelInfo *result_rel;
	TupleTableSlot *old;		/* the version locked */
	TupleTableSlot *new;		/* the version to write */
} RowUpdate;

extern bool dl_row_update_begin(RowUpdate *ru, Oid relid, ItemPointer tid,
								const AttrNumber *updated, int nupdated,
								const AttrNumber *nullable, int nnullable);
extern void dl_row_update_set(RowUpdate *ru, AttrNumber att, Datum value,
							  bool isnull);
extern void dl_row_update_end(RowUpdate *ru);

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
typedef enum DistlockObject
{
	DL_OBJECT_LOCK,
	DL_OBJECT_SESSION,
	DL_OBJECT_JOB,
	DL_OBJECT_THROTTLE
} DistlockObject;

extern bool dl_may_act_for(DistlockCall *call, Oid creator);
extern bool dl_is_admin(DistlockCall *call);
extern void dl_require_admin(DistlockCall *call, const char *fname);
extern void dl_check_role_exists(Oid role);
extern Oid	dl_arg_owner(FunctionCallInfo fcinfo, int argno,
						 DistlockCall *call);
extern void dl_check_access(DistlockCall *call, Oid creator,
							DistlockObject kind, const char *name);

/* grants.c: what a role may do in a queue */
#define DL_QUEUE_ENQUEUE	0x01
#define DL_QUEUE_CLAIM		0x02
#define DL_QUEUE_MANAGE		0x04

extern int	dl_queue_privileges(DistlockCall *call, Oid owner, Datum queue);
#define dl_queue_allowed(call, owner, queue, privs) \
	((dl_queue_privileges((call), (owner), (queue)) & (privs)) != 0)
extern void dl_queue_denied(Oid owner, Datum queue, int priv);
extern void dl_queue_check(DistlockCall *call, Oid owner, Datum queue,
						   int priv);
extern bool dl_job_visible(DistlockCall *call, Oid creator, Oid owner,
						   Datum queue);

/*
 * A grant g (an alias of distlock.queue_grants) of and to roles, not to or
 * from role 0 ('-', restored without its role), which is never honoured:
 * the predicate of queue_grants_idx, named in statements so that their
 * generic plans can use it.
 */
#define DL_GRANT_OF_ROLES(g) g ".owner <> 0::oid AND " g ".grantee <> 0::oid"

/*
 * The same rule in SQL, for statements run as the schema owner: whether
 * role caller may see job j (an alias of distlock.jobs).
 */
#define DL_JOB_VISIBLE(caller, j) \
	"(distlock.may_act_for(" caller ", " j ".created_by)" \
	" OR " DL_QUEUE_TAKES(caller, j) ")"

/*
 * Whether role caller may claim from or manage the queue of job j: take
 * any of its jobs, or hold one (a cancel in an open transaction).
 */
#define DL_QUEUE_TAKES(caller, j) \
	"(distlock.may_act_for(" caller ", " j ".queue_owner)" \
	" OR EXISTS (SELECT FROM distlock.queue_grants g" \
	"  WHERE g.owner = " j ".queue_owner AND g.queue = " j ".queue" \
	"  AND " DL_GRANT_OF_ROLES("g") \
	"  AND (g.claim OR g.manage)" \
	"  AND distlock.may_act_for(" caller ", g.grantee)))"

/* session.c */
extern bool dl_session_use(DistlockCall *call, Datum session_id,
						   TimestampTz *expires);
extern void dl_session_expired_error(Datum session_id);
extern bool dl_session_still_live(Datum session_id, TimestampTz *expires);
extern bool dl_session_is_live(Datum session_id, bool busy_is_live);
extern bool dl_session_expiry(Datum session_id, const LatestRead *as_of,
							  TimestampTz *expires);
extern bool dl_session_acting(DistlockCall *call, Datum session_id);
extern bool dl_session_end_nowait(Datum session_id);
extern int	dl_reap_expired(DistlockCall *call, TimestampTz now, int limit);
extern int	dl_reap_some(DistlockCall *call, int limit);
extern int	dl_reap_all(DistlockCall *call);

/* token.c */
extern void dl_token_prepare(void);
extern bool dl_token_rebase(void);
extern void dl_token_drawn(int64 token);

/* wake.c: who waits for what, and waking them */
typedef enum DistlockWaitKind
{
	DL_WAIT_QUEUE = 1,			/* jobs of a queue: key hashes its name */
	DL_WAIT_LEASE,				/* a lease: key hashes the lock name */
	DL_WAIT_SESSION				/* (to wake only) lease holders' session */
} DistlockWaitKind;

extern int	dl_wait_poll_interval;
extern void dl_wake_preload(void);
extern bool dl_wake_available(void);
extern void dl_wait_begin(DistlockWaitKind kind, uint64 key);
extern void dl_wait_also(uint64 session_key);
extern bool dl_wait_take_wakeup(void);
extern void dl_wait_looked(void);
extern bool dl_wait_first(void);
extern void dl_wait_pass_on(void);
extern void dl_wait_knew_due(TimestampTz due);
extern void dl_wait_end(void);
extern void dl_wait_sleep(TimestampTz until);
extern void dl_wake_at_end(DistlockWaitKind kind, Oid owner, Datum name,
						   int64 count, bool at_abort);
#define dl_wake_at_commit(kind, owner, name, count) \
	dl_wake_at_end((kind), (owner), (name), (count), false)

/* queue.c: what a statement giving jobs back to pending returns */
#define DL_JOBS_BACK_RETURNING	"queue, status, queue_owner"
extern void dl_wake_for_jobs_back(void);

/* shmem.c: the regions of shared memory, when preloaded */
typedef struct DlShmemRegion
{
	const char *name;
	Size		(*size) (void);
	void		(*init) (void *ptr);	/* when first made */
	void		(*attached) (void *ptr);	/* in every backend, or NULL */
	void	  **ptr;
} DlShmemRegion;

extern void dl_shmem_region(const DlShmemRegion *region);

/* beat.c: heartbeats kept in shared memory, persisted ahead */
extern int	dl_heartbeat_persist_ahead;
extern void dl_beat_preload(void);
extern TimestampTz dl_beat_effective(Datum id, TimestampTz row_expires);
extern bool dl_beat_due(TimestampTz now);
extern bool dl_beat_skip_write(Datum id, TimestampTz row_expires,
							   TimestampTz promise);
extern TimestampTz dl_beat_write(Datum id, TimestampTz row_expires,
								 TimestampTz promise, int64 ttl_us);
extern int	dl_beat_expired(TimestampTz now, pg_uuid_t *ids, int max);
extern void dl_beat_gone(Datum id);
extern void dl_beat_at_end(bool commit);

/* position.c: where a claim of a queue's priority group may start */
/* Longer queue names have no positions. */
#define DL_POSITION_NAME_MAX	63

typedef struct DlPositionKey
{
	Oid			dbid;
	Oid			relid;			/* distlock.jobs */
	Oid			owner;
	int32		priority;
	uint8		len;
	char		name[DL_POSITION_NAME_MAX];	/* zero-padded */
} DlPositionKey;

typedef struct DlPositionRead
{
	int			bucket;			/* -1: the group has no position */
	uint64		gen;
	DlJobPos	mark;			/* the group's start if none */
	DlPositionKey key;
} DlPositionRead;

extern void dl_position_preload(void);
extern bool dl_positions_available(void);
extern int	dl_jobpos_cmp(const DlJobPos *a, const DlJobPos *b);
extern void dl_position_none(DlPositionRead *pr);
extern void dl_position_read(Oid owner, Datum queue, int32 priority,
							 DlPositionRead *pr);
extern void dl_position_advance(const DlPositionRead *pr, DlJobPos stop);
extern void dl_position_taken(const DlPositionRead *pr, DlJobPos pos);
extern void dl_position_at_end(bool commit);
extern void dl_position_at_subabort(void);

/* maintain.c */
extern int	dl_job_retention;
extern int	dl_lock_retention;

/* queue.c */
extern bool dl_delete_completed;

/* worker.c */
extern int	dl_maintenance_naptime;
extern char *dl_maintenance_databases;
extern void dl_worker_preload(void);
extern bool dl_maintenance_serves(const char *dbname);

/* wait.c */
extern uint64 dl_wait_key_of(DistlockWaitKind kind, Oid owner, Datum name);

#endif							/* DISTLOCK_H */
