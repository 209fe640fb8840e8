/*-------------------------------------------------------------------------
 *
 * wait.c
 *		Calls that wait in the server: claim_wait(),
 *		complete_and_claim_wait() and acquire().
 *
 * Each is a procedure that does what its non-waiting function does and, if
 * that yields nothing, sleeps in its backend until what it waits for may
 * have become available, then tries again, until its wait ends.  Between
 * tries it holds nothing that others wait for: it commits before it sleeps
 * (a procedure called by CALL outside a transaction block may, through
 * SPI), so it has no snapshot (no backend_xmin, nothing held back from
 * vacuum), no row lock and no transaction lock while it sleeps.  Inside a
 * transaction block it cannot commit, so it refuses to wait there (25001);
 * with wait => '0' it is the non-waiting call and works anywhere.
 *
 * What wakes it (wake.c): the commit of a transaction that enqueued a job
 * of its queue or handed one back, or released its lease or ended the
 * lease holder's session; the instant the next job it knew of becomes due,
 * or the lease it waits for would expire or come off hold; the end of its
 * wait; and, without shared memory, every distlock.wait_poll_interval.  A
 * cancel, a statement timeout, a shutdown and the client going away end
 * it at once.
 *
 * Fairness.  Job waiters are woken oldest first (wake.c).  Lease waiters
 * for one name wait in a line, and only the first in it tries to take the
 * lease, so the waiters get it in the order they came.  With shared memory
 * the line is the order of the waiters' tickets (wake.c): the first is
 * woken when the lease may be free, the next when the first leaves, and
 * each sleeps as any waiting call does (watching its client's socket,
 * heartbeating its session).  Without it, the line is a session-level
 * lock on a tag of the name's hash, which the lock manager grants in
 * order of request; a waiter whose session needs a heartbeat leaves that
 * line to send it and joins it again at the end, and a waiter in it does
 * not watch its client's socket (client_connection_check_interval
 * does).  The line lock is let go when the call ends, on every path (a
 * transaction abort lets it go too: wait_xact_callback()), and with the
 * backend.  The lock's owner does not queue: its acquire() re-enters at
 * once, as try_acquire() does; a try_acquire() that does not wait can
 * still take a lease that is free, as it always could.
 *
 * A waiting call keeps its own session alive while it sleeps (heartbeats
 * it once half its ttl is left), in a transaction of its own.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/wait.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgrprotos.h"
#include "utils/memutils.h"
#include "utils/uuid.h"

#include "compat.h"
#include "distlock.h"

PG_FUNCTION_INFO_V1(distlock_claim_wait);
PG_FUNCTION_INFO_V1(distlock_complete_and_claim_wait);
PG_FUNCTION_INFO_V1(distlock_acquire);

/*
 * Without the background worker, a waiting claim looks at least this often:
 * a dead session's jobs come back when somebody reaps it, which may be
 * only a waiter's own look.
 */
#define DISTLOCK_WAIT_RECHECK_USECS	(5 * USECS_PER_SEC)

/*
 * What the waiting calls run through SPI (exec.c's dl_exec()) as the
 * caller, outside dl_enter(): the calls they extend check the caller's
 * rights themselves.  Every name is qualified, since the caller's
 * search_path is in force.
 */

/*
 * The jobs claimed, as a jsonb array of objects (a column of distlock.jobs
 * each), and their number.  jsonb rather than distlock.jobs[]: every
 * client can read it, and an argument of the table's row type would keep
 * the table's columns from being altered.
 */
static DistlockStmt claim_stmt = {
	"SELECT pg_catalog.jsonb_agg(j), pg_catalog.count(*)"
	" FROM distlock.claim($1, $2, $3, $4) AS j",
	4, {TEXTOID, UUIDOID, INT4OID, REGROLEOID}
};

static DistlockStmt complete_and_claim_stmt = {
	"SELECT pg_catalog.jsonb_agg(j), pg_catalog.count(*)"
	" FROM distlock.complete_and_claim($1, $2, $3, $4) AS j",
	4, {INT8OID, UUIDOID, JSONBOID, INT4OID}
};

static DistlockStmt try_acquire_stmt = {
	"SELECT distlock.try_acquire($1, $2, $3, $4, $5)",
	5, {TEXTOID, TEXTOID, INTERVALOID, UUIDOID, INTERVALOID}
};

/* ... and as the extension owner (exec.c). */

/* When the next pending job of $3's queue $1 becomes due after $2. */
static DistlockStmt next_due_stmt = {
	"SELECT min(run_at) FROM distlock.jobs"
	" WHERE queue_owner = $3 AND queue = $1 AND status = 'pending'"
	" AND run_at > $2",
	3, {TEXTOID, TIMESTAMPTZOID, REGROLEOID}
};

/* The queue of a job the caller is about to acknowledge, and its owner. */
static DistlockStmt job_queue_stmt = {
	"SELECT queue, queue_owner FROM distlock.jobs WHERE id = $1",
	1, {INT8OID}
};

/* A session's expiry and ttl. */
static DistlockStmt session_ttl_stmt = {
	"SELECT expires_at, ttl FROM distlock.sessions WHERE id = $1",
	1, {UUIDOID}
};

static DistlockStmt heartbeat_stmt = {
	"SELECT distlock.heartbeat($1)",
	1, {UUIDOID}
};

/* What keeps lock $1 from others, if its holder does nothing. */
static DistlockStmt lease_hold_stmt = {
	"SELECT l.owner, l.session_id, l.expires_at, l.hold_until, s.expires_at"
	" FROM distlock.locks l LEFT JOIN distlock.sessions s"
	" ON s.id = l.session_id WHERE l.name = $1",
	1, {TEXTOID}
};

/* The tag of the line lock this backend last took (see the header comment). */
static LOCKTAG line_tag;
static bool line_tag_set = false;
static bool wait_callback_registered = false;

/*
 * Let go of the line lock, however many times it is held: a wait that a
 * timeout or cancel ended just as the lock manager granted it leaves it
 * granted (LockErrorCleanup() takes the grant).
 */
static void
wait_line_leave(void)
{
	while (line_tag_set && dl_lock_held_by_me(&line_tag, ExclusiveLock))
		LockRelease(&line_tag, ExclusiveLock, true);
}

/*
 * A transaction that aborts while a waiting call is under way ends it: its
 * error goes to the client, so it waits no more.
 */
static void
wait_xact_callback(XactEvent event, void *arg)
{
	if (event != XACT_EVENT_ABORT)
		return;
	dl_wait_end();
	wait_line_leave();
}

/*
 * The key a wait is keyed on: 64 bits of the SHA-256 digest of prefix (of
 * prefix_len bytes) followed by the bytes of the text value (detoasted,
 * so the same however it is stored).  Never 0.  A cryptographic digest, so that no role
 * can choose a name of its own whose key is that of another role's lock
 * or queue, and stand in its line or take its wake-ups.
 */
static uint64
wait_digest(const void *prefix, size_t prefix_len, Datum value)
{
	struct varlena *v = pg_detoast_datum_packed((struct varlena *) DatumGetPointer(value));
	size_t		len = VARSIZE_ANY_EXHDR(v);
	uint8	   *buf = palloc(prefix_len + len);
	uint64		key;

	memcpy(buf, prefix, prefix_len);
	memcpy(buf + prefix_len, VARDATA_ANY(v), len);
	key = dl_sha256_key(buf, prefix_len + len);
	pfree(buf);
	return key == 0 ? 1 : key;
}

/* The key of a lock name (or, is_uuid, of a session id). */
static uint64
wait_key(Datum value, bool is_uuid)
{
	uint64		key;

	if (!is_uuid)
		return wait_digest(NULL, 0, value);
	key = dl_sha256_key(DatumGetUUIDP(value)->data, UUID_LEN);
	return key == 0 ? 1 : key;
}

/* The key of owner's queue: queues of one name but other owners differ. */
static uint64
wait_queue_key(Oid owner, Datum queue)
{
	return wait_digest(&owner, sizeof(owner), queue);
}

/*
 * The key of what a wait of kind is for: owner's queue name, a lock name,
 * or a session id (name).
 */
uint64
dl_wait_key_of(DistlockWaitKind kind, Oid owner, Datum name)
{
	if (kind == DL_WAIT_QUEUE)
		return wait_queue_key(owner, name);
	return wait_key(name, kind == DL_WAIT_SESSION);
}

/*
 * Validate the wait argument (argno) of a waiting call named fname and
 * prepare to run: returns the server time the wait ends and sets *atomic
 * to whether the call may not commit (it is inside a transaction block, or
 * an exception block), where it can only be asked not to wait.
 */
static TimestampTz
wait_begin_call(FunctionCallInfo fcinfo, int argno, const char *fname,
				bool *atomic)
{
	Interval   *wait = dl_arg_interval(fcinfo, argno, "wait", true);
	int64		usecs = dl_interval_usecs(wait);

	*atomic = !(fcinfo->context != NULL &&
				IsA(fcinfo->context, CallContext) &&
				!((CallContext *) fcinfo->context)->atomic) ||
		IsSubTransaction();
	if (*atomic && usecs > 0)
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("%s cannot wait inside a transaction block", fname),
				 errdetail("A waiting call commits before it sleeps, so that it holds no snapshot and no lock while it waits."),
				 errhint("CALL it outside BEGIN ... COMMIT, or with wait => '0'.")));
	if (!wait_callback_registered)
	{
		RegisterXactCallback(wait_xact_callback, NULL);
		wait_callback_registered = true;
	}
	if (SPI_connect_ext(*atomic ? 0 : SPI_OPT_NONATOMIC) != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	return GetCurrentTimestamp() + usecs;
}

/*
 * Run stmt as the caller; the first column of its one row, copied to cxt,
 * and the second (a count), if count is given.
 */
static Datum
wait_run(DistlockStmt *stmt, Datum *values, const char *nulls, bool *isnull,
		 int64 *count, MemoryContext cxt)
{
	Datum		result;
	Form_pg_attribute att;
	MemoryContext old;

	if (dl_exec(stmt, values, nulls, 1) != 1)
		elog(ERROR, "\"%s\" returned no row", stmt->sql);
	if (count != NULL)
	{
		bool		count_null;

		*count = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
											 SPI_tuptable->tupdesc, 2,
											 &count_null));
	}
	result = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
						   isnull);
	if (*isnull)
		return (Datum) 0;
	att = TupleDescAttr(SPI_tuptable->tupdesc, 0);
	old = MemoryContextSwitchTo(cxt);
	result = datumCopy(result, att->attbyval, att->attlen);
	MemoryContextSwitchTo(old);
	return result;
}

/*
 * Commit what the tries did and let go of the snapshot, where the call may;
 * the sleep that follows then holds nothing.
 */
static void
wait_commit(bool atomic)
{
	if (!atomic)
		SPI_commit();
}

/*
 * When the next pending job of owner's queue becomes due after now (0 if
 * none is pending).
 */
static TimestampTz
wait_next_due(Oid owner, text *queue, TimestampTz now)
{
	DistlockCall call;
	Datum		values[3];
	bool		isnull;
	TimestampTz due = 0;

	dl_enter(&call, "distlock.claim_wait()", false);
	values[0] = PointerGetDatum(queue);
	values[1] = TimestampTzGetDatum(now);
	values[2] = ObjectIdGetDatum(owner);
	if (dl_exec(&next_due_stmt, values, NULL, 1) == 1)
	{
		Datum		d = dl_getattr(0, 1, &isnull);

		if (!isnull)
			due = DatumGetTimestampTz(d);
	}
	dl_leave(&call);
	return due;
}

/*
 * Keep session_id alive while its worker waits in this call: a worker
 * blocked here is alive (were its client gone, the backend would end), but
 * cannot heartbeat.  Heartbeats the session once half its ttl is left, and
 * returns when it should next (DT_NOEND: never, the session is gone or has
 * expired; a waiter that kept beating an expired session would wake every
 * millisecond until its wait ends, since the beat_at it returned would
 * always be past).
 */
static TimestampTz
wait_keep_session(Datum session_id, TimestampTz now)
{
	DistlockCall call;
	Datum		values[1] = {session_id};
	TimestampTz beat_at = DT_NOEND;
	bool		isnull;

	for (int round = 0; round < 2; round++)
	{
		dl_enter(&call, "distlock.claim_wait()", false);
		if (dl_exec(&session_ttl_stmt, values, NULL, 1) == 1)
		{
			TimestampTz expires = dl_beat_effective(values[0],
													DatumGetTimestampTz(dl_getattr(0, 1, &isnull)));
			Interval   *ttl = DatumGetIntervalP(dl_getattr(0, 2, &isnull));

			beat_at = expires - dl_interval_usecs(ttl) / 2;
			/* expired: no heartbeat brings it back, nor should it be tried */
			if (expires <= now)
				beat_at = DT_NOEND;
		}
		dl_leave(&call);
		if (beat_at > now || round == 1)
			break;
		(void) wait_run(&heartbeat_stmt, values, NULL, &isnull, NULL,
						CurrentMemoryContext);
	}
	return beat_at;
}

/*
 * The queue of job_id, copied to cxt, and its owner; NULL if there is no
 * such job.  Nothing is told to the caller, who may see no more than the
 * acknowledgement of the job tells.
 */
static text *
wait_job_queue(Datum job_id, MemoryContext cxt, Oid *owner)
{
	DistlockCall call;
	Datum		values[1] = {job_id};
	bool		isnull;
	text	   *queue = NULL;
	MemoryContext old;

	dl_enter(&call, "distlock.complete_and_claim_wait()", false);
	if (dl_exec(&job_queue_stmt, values, NULL, 1) == 1)
	{
		old = MemoryContextSwitchTo(cxt);
		queue = DatumGetTextPCopy(dl_getattr(0, 1, &isnull));
		*owner = DatumGetObjectId(dl_getattr(0, 2, &isnull));
		MemoryContextSwitchTo(old);
	}
	dl_leave(&call);
	return queue;
}

/* Whether the caller may still claim from owner's queue (not revoked). */
static bool
wait_queue_allowed(Oid owner, text *queue)
{
	DistlockCall call;
	bool		allowed;

	dl_enter(&call, "distlock.complete_and_claim_wait()", false);
	allowed = dl_queue_allowed(&call, owner, PointerGetDatum(queue),
							   DL_QUEUE_CLAIM);
	dl_leave(&call);
	return allowed;
}

/*
 * The one-column result row of a waiting procedure (its INOUT argument):
 * value, or, if it is null and empty_array, an empty jsonb array.
 */
static Datum
wait_result(FunctionCallInfo fcinfo, Datum value, bool isnull,
			bool empty_array)
{
	TupleDesc	desc;

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	desc = BlessTupleDesc(desc);
	if (isnull && empty_array)
	{
		value = DirectFunctionCall1(jsonb_in, CStringGetDatum("[]"));
		isnull = false;
	}
	return HeapTupleGetDatum(heap_form_tuple(desc, &value, &isnull));
}

/*
 * Claim jobs for session_id until some are claimed or the wait ends at
 * deadline; the first try is made by first (claim, or complete and claim)
 * with first_values, the later ones by claim() on owner's queue; job_id, if
 * not NULL, is the job first acknowledged, and the queue (if NULL: read
 * once the job is acknowledged) that of the job, from which the caller must
 * still be allowed to claim.  Returns the jobs claimed as an array in cxt,
 * or sets *isnull if none were.
 *
 * A call that finds jobs at its first try never takes a waiter's slot, so
 * a busy worker costs nothing here; one that finds none takes a slot and
 * then looks once more before it sleeps, so that no job committed in
 * between is missed (wake.c).
 */
static Datum
wait_for_jobs(Oid owner, text *queue, const Datum *job_id, Datum session_id,
			  int32 max_jobs,
			  TimestampTz deadline, bool atomic, DistlockStmt *first,
			  Datum *first_values, const char *first_nulls, bool *isnull,
			  MemoryContext cxt)
{
	Datum		jobs;
	Datum		values[4];
	DistlockStmt *stmt = first;
	Datum	   *args = first_values;
	const char *nulls = first_nulls;
	bool		waiting = false;

	for (;;)
	{
		TimestampTz now;
		TimestampTz until;
		TimestampTz looked_at;
		bool		woken;
		int64		n;

		/* take the wake-up before looking: one that comes later stays */
		woken = dl_wait_take_wakeup();
		looked_at = GetCurrentTimestamp();
		jobs = wait_run(stmt, args, nulls, isnull, &n, cxt);
		dl_wait_looked();
		if (woken)
			elog(DEBUG1, "woken for jobs of queue \"%s\": " INT64_FORMAT " claimed",
				 text_to_cstring(queue), n);
		if (n > 0)
		{
			/*
			 * More jobs may be there for the next in line, if this look was
			 * not woken for them (a committing transaction wakes as many
			 * waiters as it made jobs available), but came at a due time.
			 * (What it knew of a job due later is handed on as it stops
			 * waiting: dl_wait_knew_due().)
			 */
			if (waiting && !woken && n == max_jobs)
				dl_wait_pass_on();
			break;
		}

		now = GetCurrentTimestamp();
		if (now >= deadline)
			break;

		if (job_id != NULL)
		{
			if (queue == NULL)
				queue = wait_job_queue(*job_id, cxt, &owner);
			/*
			 * As complete_and_claim() after a revoke: claim nothing; the same
			 * if the job was pruned in the meantime.
			 */
			if (queue == NULL || !wait_queue_allowed(owner, queue))
				break;
			job_id = NULL;
		}
		values[0] = PointerGetDatum(queue);
		values[1] = session_id;
		values[2] = Int32GetDatum(max_jobs);
		values[3] = ObjectIdGetDatum(owner);
		stmt = &claim_stmt;
		args = values;
		nulls = NULL;
		if (!waiting)
		{
			/*
			 * From now on jobs committed wake this backend: look once more,
			 * in a transaction (and snapshot) that begins after that.
			 */
			dl_wait_begin(DL_WAIT_QUEUE, wait_queue_key(owner, values[0]));
			waiting = true;
			wait_commit(atomic);
			continue;
		}
		{
			TimestampTz due = wait_next_due(owner, queue, looked_at);

			dl_wait_knew_due(due);
			until = due != 0 && due < deadline ? due : deadline;
		}
		/* nobody reaps in the background: look now and then */
		if (!dl_background_maintenance())
			until = Min(until, now + DISTLOCK_WAIT_RECHECK_USECS);
		wait_commit(atomic);
		/* a heartbeat in a transaction of its own, on the latest row */
		until = Min(until, wait_keep_session(session_id, now));
		wait_commit(atomic);
		dl_wait_sleep(until);
	}
	dl_wait_end();
	return jobs;
}

/*
 * claim_wait(queue text, session_id uuid, max_jobs integer DEFAULT 1,
 *			  wait interval DEFAULT '30 seconds',
 *			  INOUT jobs jsonb DEFAULT NULL, owner regrole DEFAULT NULL)
 *
 * claim() that waits up to wait for due jobs of owner's (NULL: the
 * caller's) queue, and returns those claimed
 * as a jsonb array of objects, one column of distlock.jobs each (none: an
 * empty array).  A procedure: CALL it outside a transaction
 * block to wait.
 */
Datum
distlock_claim_wait(PG_FUNCTION_ARGS)
{
	MemoryContext cxt = CurrentMemoryContext;
	text	   *queue = dl_arg_name(fcinfo, 0, "queue name");
	int32		max_jobs;
	TimestampTz deadline;
	bool		atomic;
	Datum		values[4];
	Datum		jobs;
	bool		isnull;

	dl_arg_not_null(fcinfo, 1, "session_id");
	max_jobs = dl_arg_int_range(fcinfo, 2, "max_jobs", 1,
								DISTLOCK_MAX_CLAIM_JOBS);
	deadline = wait_begin_call(fcinfo, 3, "distlock.claim_wait()", &atomic);

	values[0] = PointerGetDatum(queue);
	values[1] = PG_GETARG_DATUM(1);
	values[2] = Int32GetDatum(max_jobs);
	values[3] = PG_ARGISNULL(5) ? ObjectIdGetDatum(GetUserId()) :
		PG_GETARG_DATUM(5);
	jobs = wait_for_jobs(DatumGetObjectId(values[3]), queue, NULL,
						 values[1], max_jobs, deadline, atomic, &claim_stmt,
						 values, NULL, &isnull, cxt);

	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
	return wait_result(fcinfo, jobs, isnull, true);
}

/*
 * complete_and_claim_wait(job_id bigint, session_id uuid, result jsonb
 *						   DEFAULT NULL, max_jobs integer DEFAULT 1,
 *						   wait interval DEFAULT '30 seconds',
 *						   INOUT jobs jsonb DEFAULT NULL)
 *
 * complete_and_claim() that, when it claims nothing, commits the
 * acknowledgement and waits as claim_wait() does for jobs of the same
 * queue.
 */
Datum
distlock_complete_and_claim_wait(PG_FUNCTION_ARGS)
{
	MemoryContext cxt = CurrentMemoryContext;
	int32		max_jobs;
	TimestampTz deadline;
	bool		atomic;
	Datum		values[4];
	char		nulls[4] = "    ";
	Datum		jobs;
	bool		isnull;
	text	   *queue;
	Oid			owner = InvalidOid;

	dl_arg_not_null(fcinfo, 0, "job_id");
	dl_arg_not_null(fcinfo, 1, "session_id");
	max_jobs = dl_arg_int_range(fcinfo, 3, "max_jobs", 1,
								DISTLOCK_MAX_CLAIM_JOBS);
	deadline = wait_begin_call(fcinfo, 4,
							   "distlock.complete_and_claim_wait()", &atomic);

	values[0] = PG_GETARG_DATUM(0);
	values[1] = PG_GETARG_DATUM(1);
	/* the result as a value of its own: it must outlive the commits */
	values[2] = PG_ARGISNULL(2) ? (Datum) 0 :
		PointerGetDatum(PG_DETOAST_DATUM_COPY(PG_GETARG_DATUM(2)));
	nulls[2] = PG_ARGISNULL(2) ? 'n' : ' ';
	values[3] = Int32GetDatum(max_jobs);
	/*
	 * With distlock.delete_completed the acknowledgement deletes the job:
	 * its queue, to wait on, is read before.  Otherwise only if it waits.
	 */
	queue = dl_delete_completed ? wait_job_queue(values[0], cxt, &owner) : NULL;
	jobs = wait_for_jobs(owner, queue, &values[0], values[1], max_jobs,
						 deadline, atomic, &complete_and_claim_stmt, values,
						 nulls, &isnull, cxt);

	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
	return wait_result(fcinfo, jobs, isnull, true);
}

/*
 * When lock name could next be free if its holder does nothing: the end of
 * its lease (or of its session's life) and of its hold, whichever is
 * later; 0 if it is free now or the row is gone, DT_NOEND if only a
 * release frees it.  *session_key is set to the key of the holder's
 * session, if it has one (its end is announced), else to 0.
 */
static TimestampTz
wait_lease_free_at(text *name, uint64 *session_key)
{
	DistlockCall call;
	Datum		values[1] = {PointerGetDatum(name)};
	TimestampTz at = 0;
	bool		isnull;

	*session_key = 0;
	dl_enter(&call, "distlock.acquire()", false);
	if (dl_exec(&lease_hold_stmt, values, NULL, 1) == 1)
	{
		Datum		session;
		Datum		d;
		bool		released;
		bool		no_session;

		(void) dl_getattr(0, 1, &released);
		session = dl_getattr(0, 2, &no_session);
		d = dl_getattr(0, 3, &isnull);
		if (!released)
			at = isnull ? DT_NOEND : DatumGetTimestampTz(d);
		if (!released && !no_session)
		{
			/* the lease ends with its session, whichever ends first */
			*session_key = wait_key(session, true);
			d = dl_getattr(0, 5, &isnull);
			if (isnull)
				at = 0;
			else
				at = Min(at, dl_beat_effective(session,
											   DatumGetTimestampTz(d)));
		}
		d = dl_getattr(0, 4, &isnull);
		if (!isnull && DatumGetTimestampTz(d) > at)
			at = DatumGetTimestampTz(d);
	}
	dl_leave(&call);
	return at;
}

/* Whether owner holds lock name, as last committed (expired or not). */
static bool
wait_lease_held_by(text *name, text *owner)
{
	DistlockCall call;
	Datum		values[1] = {PointerGetDatum(name)};
	bool		held = false;
	bool		isnull;

	dl_enter(&call, "distlock.acquire()", false);
	if (dl_exec(&lease_hold_stmt, values, NULL, 1) == 1)
	{
		Datum		d = dl_getattr(0, 1, &isnull);

		/* names compare byte for byte */
		held = !isnull &&
			DatumGetBool(DirectFunctionCall2Coll(texteq, C_COLLATION_OID, d,
												 PointerGetDatum(owner)));
	}
	dl_leave(&call);
	return held;
}

static void
wait_line_lock_acquire(void *arg)
{
	(void) LockAcquire(&line_tag, ExclusiveLock, true, false);
}

static void
wait_line_lock_undo(void *arg)
{
	/* a session lock, granted as the wait was ended: not ours to keep */
	wait_line_leave();
}

/*
 * Without shared memory: wait until first in the lock manager's line of
 * lock name's waiters, or until deadline: returns whether first.  The lock
 * manager's own lock timeout bounds the wait (dl_wait_bounded()).
 */
static bool
wait_line_lock(text *name, TimestampTz deadline)
{
	uint64		key = wait_key(PointerGetDatum(name), false);

	wait_line_leave();
	SET_LOCKTAG_ADVISORY(line_tag, MyDatabaseId, (uint32) (key >> 32),
						 (uint32) key, DISTLOCK_TAG_LINE);
	line_tag_set = true;
	if (LockAcquire(&line_tag, ExclusiveLock, true, true) !=
		LOCKACQUIRE_NOT_AVAIL)
		return true;
	if (deadline <= GetCurrentTimestamp())
		return false;
	return dl_wait_bounded(wait_line_lock_acquire, wait_line_lock_undo, NULL,
						   deadline);
}

/*
 * Join the line of lock name's waiters: with shared memory, take a ticket
 * (wake.c: dl_wait_first() then says whether first); without, wait in the
 * lock manager's line until first, or until deadline, heartbeating the
 * session (if has_session) as wait_keep_session() does, which puts the
 * call at the end of the line again.  Returns whether in line.
 */
static bool
wait_line_join(text *name, Datum session_id, bool has_session,
			   TimestampTz deadline, bool atomic)
{
	if (dl_wake_available())
	{
		dl_wait_begin(DL_WAIT_LEASE, wait_key(PointerGetDatum(name), false));
		return true;
	}
	for (;;)
	{
		TimestampTz until = deadline;

		if (has_session)
		{
			until = Min(until, wait_keep_session(session_id,
												 GetCurrentTimestamp()));
			wait_commit(atomic);
		}
		if (wait_line_lock(name, until))
			return true;
		if (GetCurrentTimestamp() >= deadline)
			return false;
	}
}

/*
 * A try of acquire(), with its arguments: try_acquire() whose waits for the
 * lock's fences and its row end at until (lease.c: dl_try_until), the try
 * then refused: the call's deadline, or when its session is next due a
 * heartbeat.  A lease that ran out under its holder's open fencing
 * transaction, or renew() not yet committed, would otherwise hold the call
 * up past its wait, and its session's heartbeats.
 */
static Datum
wait_try_acquire(Datum *values, const char *nulls, bool *isnull,
				 TimestampTz until)
{
	volatile Datum token = (Datum) 0;

	dl_try_until = until;
	PG_TRY();
	{
		token = wait_run(&try_acquire_stmt, values, nulls, isnull, NULL,
						 CurrentMemoryContext);
	}
	PG_FINALLY();
	{
		dl_try_until = 0;
	}
	PG_END_TRY();
	return token;
}

/*
 * acquire(lock_name text, owner text, ttl interval DEFAULT '30 seconds',
 *		   session_id uuid DEFAULT NULL, min_hold interval DEFAULT NULL,
 *		   wait interval DEFAULT '30 seconds', INOUT token bigint
 *		   DEFAULT NULL)
 *
 * try_acquire() that waits up to wait, in line with the other waiters for
 * the same lock, while another owner holds it; returns the fencing token,
 * or NULL if the wait ended first.  A grant is committed before the call
 * returns.  A procedure: CALL it outside a transaction block to wait.
 */
Datum
distlock_acquire(PG_FUNCTION_ARGS)
{
	text	   *name = dl_arg_name(fcinfo, 0, "lock name");
	Datum		values[5];
	char		nulls[5] = "     ";
	TimestampTz deadline;
	TimestampTz beat_due = DT_NOEND;
	bool		atomic;
	bool		isnull = true;
	Datum		token = (Datum) 0;

	for (int i = 0; i < 5; i++)
	{
		values[i] = PG_ARGISNULL(i) ? (Datum) 0 : PG_GETARG_DATUM(i);
		nulls[i] = PG_ARGISNULL(i) ? 'n' : ' ';
	}
	values[0] = PointerGetDatum(name);
	/* the owner as a value of its own: it must outlive the commits */
	if (!PG_ARGISNULL(1))
		values[1] = PointerGetDatum(PG_DETOAST_DATUM_COPY(values[1]));
	deadline = wait_begin_call(fcinfo, 5, "distlock.acquire()", &atomic);

	/*
	 * Not waiting, or re-entering (or renewing) a lease of its own, which
	 * try_acquire() does at once: try_acquire(), which may also take a free
	 * lock at once.  A refused re-entry (the lease is another role's, or
	 * on hold) waits in line like any other.
	 */
	if (deadline <= GetCurrentTimestamp() || nulls[1] != ' ')
	{
		token = wait_run(&try_acquire_stmt, values, nulls, &isnull, NULL,
						 CurrentMemoryContext);
		goto done;
	}
	if (wait_lease_held_by(name, (text *) DatumGetPointer(values[1])))
	{
		/* when the session is next due a heartbeat: a try waits no longer */
		if (nulls[3] == ' ')
		{
			beat_due = wait_keep_session(values[3], GetCurrentTimestamp());
			wait_commit(atomic);
		}
		token = wait_try_acquire(values, nulls, &isnull,
								 Min(deadline, beat_due));
		if (!isnull || deadline <= GetCurrentTimestamp())
			goto done;
	}

	/* hold nothing while in line */
	wait_commit(atomic);
	if (!wait_line_join(name, values[3], nulls[3] == ' ', deadline, atomic))
		goto done;
	if (nulls[3] == ' ')
	{
		beat_due = wait_keep_session(values[3], GetCurrentTimestamp());
		wait_commit(atomic);
	}
	for (;;)
	{
		TimestampTz now;
		TimestampTz until = deadline;

		/* take the wake-up before looking: one that comes later stays */
		(void) dl_wait_take_wakeup();
		if (dl_wait_first())
		{
			uint64		session_key;
			TimestampTz free_at;

			token = wait_try_acquire(values, nulls, &isnull,
									 Min(deadline, beat_due));
			dl_wait_looked();
			if (!isnull)
				break;
			now = GetCurrentTimestamp();
			free_at = wait_lease_free_at(name, &session_key);
			dl_wait_also(session_key);

			/*
			 * Free now, yet refused: a grant not yet committed, one made
			 * since we looked, or a heartbeat in flight of the holder's
			 * expired session; look again shortly.
			 */
			if (free_at <= now)
				free_at = now + dl_wait_poll_interval * INT64CONST(1000);
			until = Min(free_at, deadline);
		}
		else
			dl_wait_looked();
		now = GetCurrentTimestamp();
		if (now >= deadline)
			break;
		wait_commit(atomic);
		/* a heartbeat in a transaction of its own, on the latest row */
		if (nulls[3] == ' ')
		{
			beat_due = wait_keep_session(values[3], now);
			until = Min(until, beat_due);
			wait_commit(atomic);
		}
		dl_wait_sleep(until);
	}
	/* the grant is made before the next in line looks */
	wait_commit(atomic);
	dl_wait_end();
	wait_line_leave();

done:
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
	return wait_result(fcinfo, token, isnull, false);
}
