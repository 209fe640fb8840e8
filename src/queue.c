/*-------------------------------------------------------------------------
 *
 * queue.c
 *		The job queue: enqueue, claim, complete, fail, cancel.
 *
 * A job is a row of distlock.jobs.  claim() moves due pending jobs to
 * running for a live session, skipping the jobs other transactions hold
 * (SKIP LOCKED), so concurrent claimers never wait for each other and never
 * receive the same job.  Before claiming, it reaps the caller's roles'
 * sessions that have expired, so their running jobs are claimable at once
 * whether or not reap() has run (another role's wait for that role, the
 * background worker or an administrator: session.c).  Each claim and acknowledgement is written twice, side
 * by side below: as a statement through SPI, and as the same index scan,
 * row lock and update made directly through the table AM (tables.c says
 * how, and when the direct way applies: at READ COMMITTED, by default).
 *
 * Exactly-once acknowledgement: complete() and fail() first take the
 * session's use lock and check, on the clock read after it, that the
 * session is live (session.c); then they change the job only if it is
 * still running and claimed by that session.  Reaping and closing take the
 * use lock exclusively, so an acknowledgement in flight is never reaped
 * under, and a close waits for it and then finds the job no longer
 * running; an acknowledgement that comes after the session was reaped
 * finds the session gone.  Either way exactly one of them
 * takes effect, and the worker's own writes in the acknowledging transaction
 * commit only with an accepted acknowledgement.  With
 * distlock.delete_completed on, the accepted acknowledgement deletes the job
 * instead of completing it, on the same conditions and under the same
 * locks.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/queue.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/pg_prng.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/uuid.h"
#include "utils/tuplestore.h"

#include "distlock.h"

PG_FUNCTION_INFO_V1(distlock_enqueue);
PG_FUNCTION_INFO_V1(distlock_claim);
PG_FUNCTION_INFO_V1(distlock_complete);
PG_FUNCTION_INFO_V1(distlock_complete_batch);
PG_FUNCTION_INFO_V1(distlock_complete_and_claim);
PG_FUNCTION_INFO_V1(distlock_complete_batch_and_claim);
PG_FUNCTION_INFO_V1(distlock_fail);
PG_FUNCTION_INFO_V1(distlock_cancel);

/* The predicate of jobs_dedup_idx, which ON CONFLICT must name. */
#define DEDUP_PREDICATE \
	"dedup_key IS NOT NULL AND status <= 'running'::distlock.job_status" \
	" AND queue_owner <> 0::oid"

static DistlockStmt insert_stmt = {
	"INSERT INTO distlock.jobs (queue, payload, status, priority, run_at,"
	" attempts, max_attempts, dedup_key, created_at, created_by,"
	" queue_owner)"
	" VALUES ($1, $2, 'pending', $3, $4, 0, $5, $6, $7, $8, $9)"
	" ON CONFLICT (queue_owner, queue, dedup_key) WHERE " DEDUP_PREDICATE
	" DO NOTHING RETURNING id",
	9, {TEXTOID, JSONBOID, INT4OID, TIMESTAMPTZOID, INT4OID, TEXTOID,
	TIMESTAMPTZOID, REGROLEOID, REGROLEOID}
};

static DistlockStmt find_dedup_stmt = {
	"SELECT id, created_by FROM distlock.jobs"
	" WHERE queue_owner = $3 AND queue = $1 AND dedup_key = $2"
	" AND " DEDUP_PREDICATE,
	3, {TEXTOID, TEXTOID, REGROLEOID}
};

/*
 * Claim order is priority (higher first), run_at, id: a walk of
 * jobs_claim_idx from its start for the queue of owner $5, skipping rows
 * that other claimers hold.  Every job of the queue is the caller's to
 * claim (grants.c), so nothing else is skipped.  The picked ids go to the
 * UPDATE as an array, so that its generic plan fetches them by jobs_pkey
 * whatever LIMIT $4 is (joined to a CTE instead, the generic plan
 * merge-joins the whole of jobs_pkey).
 */

static DistlockStmt claim_stmt = {
	"WITH claimed AS ("
	"  UPDATE distlock.jobs SET status = 'running', session_id = $2,"
	"   claimed_at = $3, attempts = attempts + 1"
	"  WHERE id = ANY (ARRAY("
	"   SELECT id FROM distlock.jobs"
	"   WHERE queue_owner = $5 AND queue = $1 AND status = 'pending'"
	"    AND run_at <= $3"
	"   ORDER BY priority DESC, run_at, id"
	"   LIMIT $4 FOR UPDATE SKIP LOCKED))"
	"  RETURNING *)"
	" SELECT * FROM claimed ORDER BY priority DESC, run_at, id",
	5, {TEXTOID, UUIDOID, TIMESTAMPTZOID, INT4OID, REGROLEOID}
};

/* The same for one job ($4 is 1): no CTE and no sort to set up. */
static DistlockStmt claim_one_stmt = {
	"UPDATE distlock.jobs SET status = 'running', session_id = $2,"
	" claimed_at = $3, attempts = attempts + 1"
	" WHERE id = ("
	"  SELECT id FROM distlock.jobs"
	"  WHERE queue_owner = $5 AND queue = $1 AND status = 'pending'"
	"   AND run_at <= $3"
	"  ORDER BY priority DESC, run_at, id"
	"  LIMIT $4 FOR UPDATE SKIP LOCKED)"
	" RETURNING *",
	5, {TEXTOID, UUIDOID, TIMESTAMPTZOID, INT4OID, REGROLEOID}
};

/*
 * The acknowledgements find the job by jobs_pkey.  Their session and status
 * tests are written IS NOT DISTINCT FROM (the same as = here: $2 and status
 * are never null) so that neither can be an index condition nor prove the
 * predicate of jobs_running_session_idx: otherwise the generic plan, made
 * while few jobs were running, may scan that whole index (or the session's
 * part of it) for every acknowledgement, stepping over every entry left
 * there since the last vacuum (a batch of 100 ran four times slower).
 * They run once the call has found the session live (with its use lock
 * held).
 */
static DistlockStmt complete_batch_held_stmt = {
	"WITH done AS ("
	" UPDATE distlock.jobs SET status = 'completed', finished_at = $3,"
	" result = $4"
	" WHERE id = ANY ($1) AND status IS NOT DISTINCT FROM 'running'"
	" AND session_id IS NOT DISTINCT FROM $2"
	" RETURNING id, queue, queue_owner)"
	" SELECT id, queue, queue_owner FROM done ORDER BY id",
	4, {INT8ARRAYOID, UUIDOID, TIMESTAMPTZOID, JSONBOID}
};

/*
 * The first of an array's job ids that is no job role $2 may see
 * (queue_job_check()).
 */
static DistlockStmt missing_job_stmt = {
	"SELECT i FROM unnest($1) i"
	" WHERE NOT EXISTS (SELECT 1 FROM distlock.jobs j WHERE j.id = i"
	" AND " DL_JOB_VISIBLE("$2", "j") ")"
	" ORDER BY i LIMIT 1",
	2, {INT8ARRAYOID, REGROLEOID}
};

/* One job, acknowledged at $3; returns its queue and the queue's owner. */
static DistlockStmt complete_held_stmt = {
	"UPDATE distlock.jobs SET status = 'completed', finished_at = $3,"
	" result = $4"
	" WHERE id = $1 AND status IS NOT DISTINCT FROM 'running'"
	" AND session_id IS NOT DISTINCT FROM $2"
	" RETURNING queue, queue_owner",
	4, {INT8OID, UUIDOID, TIMESTAMPTZOID, JSONBOID}
};

/*
 * complete_held_stmt and complete_batch_held_stmt where
 * distlock.delete_completed is on: the acknowledgement deletes the job
 * (queue_keeps_completed()).
 */
static DistlockStmt complete_delete_stmt = {
	"DELETE FROM distlock.jobs"
	" WHERE id = $1 AND status IS NOT DISTINCT FROM 'running'"
	" AND session_id IS NOT DISTINCT FROM $2"
	" RETURNING queue, queue_owner",
	2, {INT8OID, UUIDOID}
};

static DistlockStmt complete_batch_delete_stmt = {
	"WITH done AS ("
	" DELETE FROM distlock.jobs"
	" WHERE id = ANY ($1) AND status IS NOT DISTINCT FROM 'running'"
	" AND session_id IS NOT DISTINCT FROM $2"
	" RETURNING id, queue, queue_owner)"
	" SELECT id, queue, queue_owner FROM done ORDER BY id",
	2, {INT8ARRAYOID, UUIDOID}
};

/*
 * A failed attempt: back to pending after $5 (NULL: the backoff
 * min(2^attempts s, 1 h) scaled by the jitter $6 in [0.5, 1)), or failed
 * once max_attempts claims have been made.
 */
static DistlockStmt fail_stmt = {
	"UPDATE distlock.jobs SET"
	" status = CASE WHEN attempts >= max_attempts"
	"  THEN 'failed' ELSE 'pending' END::distlock.job_status,"
	" run_at = CASE WHEN attempts >= max_attempts THEN run_at"
	"  ELSE $3 + coalesce($5, make_interval(secs =>"
	"   least(power(2.0, attempts), 3600) * $6)) END,"
	" session_id = CASE WHEN attempts >= max_attempts THEN session_id END,"
	" finished_at = CASE WHEN attempts >= max_attempts THEN $3 END,"
	" last_error = $4"
	" WHERE id = $1 AND status IS NOT DISTINCT FROM 'running'"
	" AND session_id IS NOT DISTINCT FROM $2"
	" RETURNING " DL_JOBS_BACK_RETURNING,
	6, {INT8OID, UUIDOID, TIMESTAMPTZOID, TEXTOID, INTERVALOID, FLOAT8OID}
};

/* A cancel by the queue's managers ($3 true), or the job's creator. */
static DistlockStmt cancel_stmt = {
	"UPDATE distlock.jobs SET status = 'cancelled', finished_at = $2"
	" WHERE id = $1 AND CASE WHEN $3 THEN status <= 'running'"
	"  ELSE status = 'pending' END",
	3, {INT8OID, TIMESTAMPTZOID, BOOLOID}
};

static DistlockStmt creator_stmt = {
	"SELECT created_by, queue_owner, queue FROM distlock.jobs WHERE id = $1",
	1, {INT8OID}
};

static void queue_put_job(ReturnSetInfo *rsinfo, HeapTuple row,
						  TupleDesc rowdesc);

/*
 * Raise 42704 unless job_id is a job the caller may see (grants.c): one it
 * may not is told no more than an id that is no job, as in the views.
 * Called when an acknowledgement changed nothing, so that a wrong id is
 * not mistaken for a refusal, and before a cancel, which only the job's
 * creator and the queue's managers may make (42501 for others that see
 * it).  Returns whether the caller manages the job's queue.
 */
static bool
queue_job_check(DistlockCall *call, Datum job_id, bool cancel)
{
	Datum		values[1] = {job_id};
	Oid			creator;
	Oid			owner;
	Datum		queue;
	int			privs;
	bool		isnull;

	if (dl_exec(&creator_stmt, values, NULL, 1) == 0)
		goto missing;
	creator = DatumGetObjectId(dl_getattr(0, 1, &isnull));
	owner = DatumGetObjectId(dl_getattr(0, 2, &isnull));
	queue = PointerGetDatum(DatumGetTextPCopy(dl_getattr(0, 3, &isnull)));
	/* dl_job_visible(), with the queue's grants read once */
	privs = dl_queue_privileges(call, owner, queue);
	if ((privs & DL_QUEUE_MANAGE) != 0)
		return cancel;
	if (dl_may_act_for(call, creator))
		return false;
	if ((privs & DL_QUEUE_CLAIM) == 0)
		goto missing;
	if (cancel)
		dl_queue_denied(owner, queue, DL_QUEUE_MANAGE);
	return false;

missing:
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("job " INT64_FORMAT " does not exist",
					DatumGetInt64(job_id))));
}

/*
 * enqueue(queue text, payload jsonb DEFAULT '{}', run_at timestamptz
 *		   DEFAULT NULL, priority integer DEFAULT 0, max_attempts integer
 *		   DEFAULT 5, dedup_key text DEFAULT NULL, owner regrole DEFAULT
 *		   NULL) RETURNS bigint
 *
 * Add a pending job due at run_at (NULL: now) to owner's (NULL: the
 * caller's) queue and return its id.  If a job with the same dedup_key is
 * pending or running in the queue, return its id and add nothing.  Adding
 * to another role's queue takes its enqueue privilege (42501).
 */
Datum
distlock_enqueue(PG_FUNCTION_ARGS)
{
	text	   *queue = dl_arg_name(fcinfo, 0, "queue name");
	text	   *dedup_key;
	DistlockCall call;
	Datum		values[9];
	char		nulls[9] = "         ";
	TimestampTz now;
	Oid			owner;
	int64		id;

	dl_arg_not_null(fcinfo, 1, "payload");
	dl_arg_not_null(fcinfo, 3, "priority");
	values[4] = Int32GetDatum(dl_arg_int_range(fcinfo, 4, "max_attempts",
											   1, DISTLOCK_MAX_ATTEMPTS));
	dedup_key = dl_arg_optional_name(fcinfo, 5, "dedup_key");
	if (!PG_ARGISNULL(2) && TIMESTAMP_NOT_FINITE(PG_GETARG_TIMESTAMPTZ(2)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("run_at must be finite")));

	values[0] = PointerGetDatum(queue);
	values[1] = PG_GETARG_DATUM(1);
	values[2] = PG_GETARG_DATUM(3);
	values[5] = PointerGetDatum(dedup_key);
	nulls[5] = dedup_key ? ' ' : 'n';

	dl_enter(&call, "distlock.enqueue()", true);
	owner = dl_arg_owner(fcinfo, 6, &call);
	dl_queue_check(&call, owner, values[0], DL_QUEUE_ENQUEUE);
	dl_limit_size(values[1], "payload", call.caller);
	now = GetCurrentTimestamp();
	values[3] = PG_ARGISNULL(2) ? TimestampTzGetDatum(now) : PG_GETARG_DATUM(2);
	values[6] = TimestampTzGetDatum(now);
	values[7] = ObjectIdGetDatum(call.caller);
	values[8] = ObjectIdGetDatum(owner);

	/*
	 * On a dedup conflict, return the job we conflicted with.  Should it have
	 * finished before we look, insert again.  (At REPEATABLE READ a
	 * conflict with a job our snapshot cannot see raises 40001 instead.)
	 */
	for (;;)
	{
		Datum		dedup_values[3] = {values[0], values[5], values[8]};
		bool		isnull;

		if (dl_exec(&insert_stmt, values, nulls, 0) == 1)
		{
			id = dl_getint64(0, 1);
			dl_wake_at_commit(DL_WAIT_QUEUE, owner, values[0], 1);
			break;
		}
		if (dl_exec(&find_dedup_stmt, dedup_values, NULL, 1) == 1)
		{
			/*
			 * Another producer's job in the queue is not ours to see: not
			 * even its id.
			 */
			id = dl_getint64(0, 1);
			if (!dl_job_visible(&call,
								DatumGetObjectId(dl_getattr(0, 2, &isnull)),
								owner, values[0]))
				ereport(ERROR,
						(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
						 errmsg("dedup key \"%s\" of queue \"%s\" is taken by another role's job",
								text_to_cstring(dedup_key),
								text_to_cstring(queue))));
			break;
		}
		CHECK_FOR_INTERRUPTS();
	}
	dl_leave(&call);

	PG_RETURN_INT64(id);
}

/*
 * The jobs the last statement (RETURNING DL_JOBS_BACK_RETURNING) gave back
 * to pending wake their queues' waiters once the transaction commits.
 */
void
dl_wake_for_jobs_back(void)
{
	const DistlockCatalog *cat = dl_catalog();

	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Oid			owner = DatumGetObjectId(dl_getattr(i, 3, &isnull));

		if (DatumGetObjectId(dl_getattr(i, 2, &isnull)) != cat->status_pending)
			continue;
		dl_wake_at_commit(DL_WAIT_QUEUE, owner, dl_getattr(i, 1, &isnull), 1);
	}
}

/*
 * Claim up to max_jobs due (run_at <= now) pending jobs of owner's queue
 * for session_id, in claim order; put them, as they now are, into store
 * and their number into *claimed.  The caller may claim from the queue,
 * holds the session's use lock and has found it live at now.  Returns
 * false, doing nothing, where the direct paths do not apply.
 *
 * With claim positions (position.c), the queue is walked one priority
 * group at a time, each from its position, which the walk then moves on
 * to the first job it could not rule out (one another transaction only
 * locks, or one not yet due), or past the group's last entry.  A group's jobs are in run_at order, so its first
 * job not yet due ends its walk.  Without them, the queue is walked from
 * its start in one scan.
 */
static bool
queue_claim_direct(Oid owner, Datum queue, Datum session_id,
				int32 max_jobs, TimestampTz now, Tuplestorestate *store,
				uint64 *claimed)
{
	const DistlockCatalog *cat;
	JobsTable	jt;
	AttrNumber	updated[4];
	Relation	idx;
	uint64		n = 0;
	bool		walked_once = false;
	bool		positions;
	int32		priority = 0;

	cat = dl_catalog();
	updated[0] = cat->job_status;
	updated[1] = cat->job_attempts;
	updated[2] = cat->job_session_id;
	updated[3] = cat->job_claimed_at;
	if (!dl_jobs_open(&jt, updated, lengthof(updated)))
		return false;
	idx = index_open(cat->jobs_claim_idx, RowExclusiveLock);
	positions = jt.positions && dl_positions_available();

	while (n < (uint64) max_jobs)
	{
		DlPositionRead pr;
		DlLockResult lock;
		DlJobPos	stop = {0, 0};
		DlJobPos	walked = {DT_NOBEGIN, PG_INT64_MIN};
		bool		stopped = false;
		IndexScanDesc scan;

		if (!positions)
		{
			if (walked_once)
				break;
			dl_position_none(&pr);
			scan = dl_jobs_scan_queue(&jt, idx, owner, queue, NULL, NULL);
		}
		else
		{
			if (!dl_jobs_next_group(&jt, idx, owner, queue, walked_once,
									priority, &priority))
				break;
			/* before the scan's snapshot is taken */
			dl_position_read(owner, queue, priority, &pr);
			scan = dl_jobs_scan_queue(&jt, idx, owner, queue, &priority,
									  pr.mark.run_at != DT_NOBEGIN ?
									  &pr.mark : NULL);
		}
		walked_once = true;

		for (;;)
		{
			Datum	   *v;
			DlJobPos	pos;

			if (n >= (uint64) max_jobs)
				break;
			if (!dl_jobs_next(scan, jt.old, &walked))
				break;
			CHECK_FOR_INTERRUPTS();
			dl_jobs_new_from_old(&jt);
			v = jt.old->tts_values;
			if (DatumGetObjectId(v[cat->job_status - 1]) != cat->status_pending)
				continue;
			pos.run_at = DatumGetTimestampTz(v[cat->job_run_at - 1]);
			pos.id = DatumGetInt64(v[cat->job_id - 1]);
			if (pos.run_at > now)
			{
				if (!positions)
					continue;
				if (!stopped)
				{
					stop = pos;
					stopped = true;
				}
				break;			/* the rest of the group is later still */
			}
			lock = dl_jobs_lock_or_skip(&jt, scan->xs_snapshot);
			if (lock != DL_LOCKED)
			{
				/*
				 * Held or changed by somebody else: skip it.  A transaction
				 * that changes it notes it first (position.c), so that its
				 * abort lowers the position; a lock alone does not.
				 */
				if (lock == DL_LOCK_HELD && !stopped)
				{
					stop = pos;
					stopped = true;
				}
				continue;
			}
			/* pending again should this transaction roll back: noted first */
			dl_position_taken(&pr, pos);

			dl_jobs_set(&jt, cat->job_status,
						ObjectIdGetDatum(cat->status_running), false);
			dl_jobs_set(&jt, cat->job_session_id, session_id, false);
			dl_jobs_set(&jt, cat->job_claimed_at, TimestampTzGetDatum(now),
						false);
			dl_jobs_set(&jt, cat->job_attempts,
						Int32GetDatum(DatumGetInt32(v[cat->job_attempts - 1]) + 1),
						false);
			/* the version is locked by us: the update cannot find it changed */
			if (dl_jobs_update(&jt, scan->xs_snapshot, true) != TM_Ok)
				elog(ERROR, "could not update locked job");

			tuplestore_puttupleslot(store, jt.new);
			n++;
		}
		dl_jobs_scan_end(scan);

		/*
		 * A walk that ruled out every entry it read (claimed, passed: none
		 * stopped it) moves the position past the last of them.
		 */
		if (!stopped && walked.run_at != DT_NOBEGIN &&
			walked.id < PG_INT64_MAX)
		{
			stop = walked;
			stop.id++;
			stopped = true;
		}
		if (stopped)
			dl_position_advance(&pr, stop);
	}

	index_close(idx, NoLock);
	dl_jobs_close(&jt);
	*claimed = n;
	return true;
}

/*
 * Open distlock.jobs and jobs_pkey for the direct path of an
 * acknowledgement, which changes a job's status, finished_at and result.
 * Returns false, opening nothing, where the direct paths do not apply.
 */
static bool
queue_ack_open(JobsTable *jt, Relation *idx)
{
	const DistlockCatalog *cat = dl_catalog();
	AttrNumber	updated[3] = {
		cat->job_status, cat->job_finished_at, cat->job_result
	};

	if (!dl_jobs_open(jt, updated, lengthof(updated)))
		return false;
	*idx = index_open(cat->jobs_pkey, RowExclusiveLock);
	return true;
}

static void
queue_ack_close(JobsTable *jt, Relation idx)
{
	index_close(idx, NoLock);
	dl_jobs_close(jt);
}

/* distlock.delete_completed: see distlock.c */
bool		dl_delete_completed = false;

/*
 * Whether a completed job stays in distlock.jobs, to be pruned after
 * distlock.job_retention by maintain().  With distlock.delete_completed the
 * acknowledgement deletes it instead: one deletion, where the update and
 * its later pruning write a new version, two index entries and a deletion.
 * A later acknowledgement of the job then raises 42704, as one after the
 * pruning would.
 */
static bool
queue_keeps_completed(void)
{
	return !dl_delete_completed;
}

/*
 * Complete job_id with result (NULL: none) at now if it is running for
 * session_id, whose use lock the caller holds and which it has found live,
 * through jt and idx (queue_ack_open()); delete it instead if keep is
 * false (queue_keeps_completed()).  Returns whether it was; *queue, if
 * given, is then the job's queue (palloc'd) and *owner the queue's owner.
 */
static bool
queue_complete_one(JobsTable *jt, Relation idx, Datum job_id,
				   Datum session_id, Datum result, bool result_isnull,
				   TimestampTz now, bool keep, text **queue, Oid *owner)
{
	const DistlockCatalog *cat = jt->cat;
	TM_Result	tm = TM_Updated;
	bool		done = false;

	/* changed by somebody else since our snapshot: look again */
	while (tm == TM_Updated)
	{
		IndexScanDesc scan;
		Datum	   *v;

		CHECK_FOR_INTERRUPTS();
		scan = dl_jobs_scan(jt, idx, F_INT8EQ, job_id);
		tm = TM_Invisible;
		if (index_getnext_slot(scan, ForwardScanDirection, jt->old))
		{
			dl_jobs_new_from_old(jt);
			v = jt->old->tts_values;
			if (DatumGetObjectId(v[cat->job_status - 1]) ==
				cat->status_running &&
				!jt->old->tts_isnull[cat->job_session_id - 1] &&
				memcmp(DatumGetUUIDP(v[cat->job_session_id - 1]),
					   DatumGetUUIDP(session_id), UUID_LEN) == 0)
			{
				if (keep)
				{
					dl_jobs_set(jt, cat->job_status,
								ObjectIdGetDatum(cat->status_completed),
								false);
					dl_jobs_set(jt, cat->job_finished_at,
								TimestampTzGetDatum(now), false);
					dl_jobs_set(jt, cat->job_result, result, result_isnull);
					tm = dl_jobs_update(jt, scan->xs_snapshot, true);
				}
				else
					tm = dl_jobs_delete(jt, scan->xs_snapshot, true);
				done = tm == TM_Ok;
				if (done && queue)
				{
					*queue = DatumGetTextPCopy(v[cat->job_queue - 1]);
					*owner = DatumGetObjectId(v[cat->job_queue_owner - 1]);
				}
			}
		}
		dl_jobs_scan_end(scan);
	}
	return done;
}

/*
 * complete()'s direct path: queue_complete_one() for job_id.  *done says
 * whether the job was completed.  Returns false, doing nothing, where the
 * direct paths do not apply.
 */
static bool
queue_complete_direct(Datum job_id, Datum session_id, Datum result,
				   bool result_isnull, TimestampTz now, bool *done,
				   text **queue, Oid *owner)
{
	JobsTable	jt;
	Relation	idx;

	if (!queue_ack_open(&jt, &idx))
		return false;
	*done = queue_complete_one(&jt, idx, job_id, session_id, result,
							   result_isnull, now, queue_keeps_completed(),
							   queue, owner);
	queue_ack_close(&jt, idx);
	return true;
}

static int
queue_cmp_id(const void *a, const void *b)
{
	int64		x = DatumGetInt64(*(const Datum *) a);
	int64		y = DatumGetInt64(*(const Datum *) b);

	return (x > y) - (x < y);
}

/*
 * The ids of a batch in ascending order, each once, to *elems (palloc'd);
 * returns their number.
 */
static int
queue_batch_ids(ArrayType *ids, Datum **elems)
{
	Datum	   *e;
	int			nelems;
	int			n = 0;

	deconstruct_array(ids, INT8OID, sizeof(int64), FLOAT8PASSBYVAL,
					  TYPALIGN_DOUBLE, &e, NULL, &nelems);
	qsort(e, nelems, sizeof(Datum), queue_cmp_id);
	for (int i = 0; i < nelems; i++)
		if (n == 0 || DatumGetInt64(e[i]) != DatumGetInt64(e[n - 1]))
			e[n++] = e[i];
	*elems = e;
	return n;
}

/*
 * What a batch's acknowledgement gives back: the distinct ids asked for, in
 * ascending order, and their number; the ids acknowledged, in ascending
 * order, to acked and to ids if it is not NULL (a tuplestore of one bigint
 * column, desc), and their number; and, if want_queue, the queue of the
 * first job acknowledged, with mixed set once a job of another is.
 */
typedef struct BatchAck
{
	Tuplestorestate *ids;
	TupleDesc	desc;
	bool		want_queue;
	Datum	   *elems;
	int			asked;
	Datum	   *acked;
	uint64		n;
	text	   *queue;
	Oid			owner;
	bool		mixed;
} BatchAck;

/* Note job id, of owner's queue, as acknowledged in ack. */
static void
queue_ack_note(BatchAck *ack, Datum id, text *queue, Oid owner)
{
	bool		isnull = false;

	if (ack->ids)
		tuplestore_putvalues(ack->ids, ack->desc, &id, &isnull);
	ack->acked[ack->n] = id;
	if (!ack->want_queue)
		ack->n++;
	else if (ack->n++ == 0)
	{
		ack->queue = queue;
		ack->owner = owner;
	}
	else if (owner != ack->owner ||
			 VARSIZE_ANY_EXHDR(queue) != VARSIZE_ANY_EXHDR(ack->queue) ||
			 memcmp(VARDATA_ANY(queue), VARDATA_ANY(ack->queue),
					VARSIZE_ANY_EXHDR(queue)) != 0)
		ack->mixed = true;
}

/*
 * The direct path of a batch's acknowledgement: queue_complete_one() for
 * each of the n ids of elems, in ascending order and each once (the order
 * of the SQL path's answer), noted in ack.  Returns false, doing nothing,
 * where the direct paths do not apply.
 */
static bool
queue_complete_batch_direct(BatchAck *ack, Datum *elems, int n,
							Datum session_id, Datum result, bool result_isnull,
							TimestampTz now)
{
	JobsTable	jt;
	Relation	idx;
	bool		keep = queue_keeps_completed();

	if (!queue_ack_open(&jt, &idx))
		return false;
	for (int i = 0; i < n; i++)
	{
		text	   *queue = NULL;
		Oid			owner = InvalidOid;

		if (queue_complete_one(&jt, idx, elems[i], session_id, result,
							   result_isnull, now, keep,
							   ack->want_queue ? &queue : NULL, &owner))
			queue_ack_note(ack, elems[i], queue, owner);
	}
	queue_ack_close(&jt, idx);
	return true;
}

/*
 * Acknowledge each job of ids (no nulls) that is running for session_id,
 * which the call uses and has found live, with result (NULL: none), as
 * complete() does, noting them in ack; directly where the direct paths
 * apply, otherwise in one statement.
 */
static void
queue_complete_batch(BatchAck *ack, ArrayType *ids, Datum session_id,
					 NullableDatum result)
{
	TimestampTz now = GetCurrentTimestamp();
	Datum		values[4];
	char		nulls[4] = "    ";
	uint64		n;
	Datum	   *elems;

	ack->asked = queue_batch_ids(ids, &elems);
	ack->elems = elems;
	ack->acked = palloc(sizeof(Datum) * ack->asked);
	if (queue_complete_batch_direct(ack, elems, ack->asked, session_id,
									result.value, result.isnull, now))
		return;
	values[0] = PointerGetDatum(ids);
	values[1] = session_id;
	values[2] = TimestampTzGetDatum(now);
	values[3] = result.isnull ? (Datum) 0 : result.value;
	nulls[3] = result.isnull ? 'n' : ' ';
	n = dl_exec(queue_keeps_completed() ?
				&complete_batch_held_stmt : &complete_batch_delete_stmt,
				values, nulls, 0);
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;
		Datum		id = dl_getattr(i, 1, &isnull);

		/* detoasted, as the direct path gives it, to be compared by bytes */
		queue_ack_note(ack, id,
					   ack->want_queue ?
					   DatumGetTextPCopy(dl_getattr(i, 2, &isnull)) : NULL,
					   DatumGetObjectId(dl_getattr(i, 3, &isnull)));
	}
}

/*
 * An acknowledgement of ids that left some of them unacknowledged: raise
 * 42704 for the first id that is no job the caller may see
 * (queue_job_check()).  The ids it acknowledged are left out: with
 * distlock.delete_completed it deleted them.
 */
static void
queue_batch_check(DistlockCall *call, BatchAck *ack, ArrayType *ids)
{
	Datum		values[2];

	if (ack->elems != NULL)
	{
		Datum	   *left = palloc(sizeof(Datum) * ack->asked);
		int			n = 0;
		uint64		a = 0;

		/* both ascending: ack->acked is a subsequence of ack->elems */
		for (int i = 0; i < ack->asked; i++)
		{
			if (a < ack->n &&
				DatumGetInt64(ack->acked[a]) == DatumGetInt64(ack->elems[i]))
				a++;
			else
				left[n++] = ack->elems[i];
		}
		if (n == 0)
			return;				/* only duplicates were left over */
		ids = construct_array(left, n, INT8OID, sizeof(int64),
							  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE);
	}

	values[0] = PointerGetDatum(ids);
	values[1] = ObjectIdGetDatum(call->caller);
	if (dl_exec(&missing_job_stmt, values, NULL, 1) == 1)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("job " INT64_FORMAT " does not exist",
						dl_getint64(0, 1))));
}

/*
 * Claim up to max_jobs due jobs of owner's queue, which the caller may
 * claim from, for session_id, which the call uses and found live until
 * expires, after reaping expired sessions if
 * reap (dl_session_use() found some), and hand them to the caller of the
 * set-returning function, in claim order.  Nothing is claimed if the
 * session has expired since (complete_and_claim() may have waited for its
 * job): a dead session's worker gets no new work.  The session itself is
 * never reaped here (session.c), so it still exists for whatever jobs are
 * claimed.  At READ COMMITTED the claim works on the table directly
 * (tables.c); otherwise it is one statement.
 */
static void
queue_claim(DistlockCall *call, FunctionCallInfo fcinfo, Oid owner,
			Datum queue, Datum session_id, int32 max_jobs, TimestampTz expires,
			bool reap)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TimestampTz now = GetCurrentTimestamp();
	Datum		values[5];
	uint64		n;

	if (reap)
		dl_reap_expired(call, now, DISTLOCK_REAP_BATCH);
	if (expires <= now)
		return;
	if (!queue_claim_direct(owner, queue, session_id, max_jobs, now,
							rsinfo->setResult, &n))
	{
		values[0] = queue;
		values[1] = session_id;
		values[2] = TimestampTzGetDatum(now);
		values[3] = Int32GetDatum(max_jobs);
		values[4] = ObjectIdGetDatum(owner);
		n = dl_exec(max_jobs == 1 ? &claim_one_stmt : &claim_stmt,
					values, NULL, 0);
		for (uint64 i = 0; i < n; i++)
			queue_put_job(rsinfo, SPI_tuptable->vals[i],
						  SPI_tuptable->tupdesc);
	}
	/* should the claim roll back, its jobs are for the queue's waiters */
	dl_wake_at_end(DL_WAIT_QUEUE, owner, queue, n, true);
}

/*
 * Add a job row as RETURNING * gave it (the table's live columns) to the
 * result of a function returning distlock.jobs, whose row type also keeps
 * the table's dropped columns.
 */
static void
queue_put_job(ReturnSetInfo *rsinfo, HeapTuple row, TupleDesc rowdesc)
{
	TupleDesc	desc = rsinfo->setDesc;
	Datum	   *values = palloc(desc->natts * sizeof(Datum));
	bool	   *nulls = palloc(desc->natts * sizeof(bool));
	int			col = 0;

	for (int i = 0; i < desc->natts; i++)
	{
		if (TupleDescAttr(desc, i)->attisdropped)
		{
			values[i] = (Datum) 0;
			nulls[i] = true;
			continue;
		}
		if (++col > rowdesc->natts)
			elog(ERROR, "claim returned %d columns, expected more",
				 rowdesc->natts);
		values[i] = SPI_getbinval(row, rowdesc, col, &nulls[i]);
	}
	if (col != rowdesc->natts)
		elog(ERROR, "claim returned %d columns, expected %d",
			 rowdesc->natts, col);
	tuplestore_putvalues(rsinfo->setResult, desc, values, nulls);
	pfree(values);
	pfree(nulls);
}

/*
 * claim(queue text, session_id uuid, max_jobs integer DEFAULT 1,
 *		 owner regrole DEFAULT NULL) RETURNS SETOF distlock.jobs
 *
 * Move up to max_jobs (1 to DISTLOCK_MAX_CLAIM_JOBS) due pending jobs of
 * owner's (NULL: the caller's) queue to running for the session, in claim
 * order, and return them as they now are.  Never waits for another
 * claimer.  Claiming from another role's queue takes its claim privilege
 * (42501); a session that is not live raises 42704 or 55000.
 */
Datum
distlock_claim(PG_FUNCTION_ARGS)
{
	text	   *queue = dl_arg_name(fcinfo, 0, "queue name");
	DistlockCall call;
	Datum		session_id;
	int32		max_jobs;
	Oid			owner;
	TimestampTz expires;
	bool		reap;

	dl_arg_not_null(fcinfo, 1, "session_id");
	session_id = PG_GETARG_DATUM(1);
	max_jobs = dl_arg_int_range(fcinfo, 2, "max_jobs", 1,
								DISTLOCK_MAX_CLAIM_JOBS);

	InitMaterializedSRF(fcinfo, 0);

	dl_enter(&call, "distlock.claim()", true);
	owner = dl_arg_owner(fcinfo, 3, &call);
	dl_queue_check(&call, owner, PointerGetDatum(queue), DL_QUEUE_CLAIM);
	reap = dl_session_use(&call, session_id, &expires);
	queue_claim(&call, fcinfo, owner, PointerGetDatum(queue), session_id,
				max_jobs, expires, reap);
	dl_leave(&call);

	return (Datum) 0;
}

/*
 * Complete the job of argument 0 with the result of argument 2 if it is
 * running for the session of argument 1, which the call uses and has found
 * live; set *queue, if given, to its queue, and *owner to the queue's
 * owner.  Returns whether it was.
 */
static bool
queue_complete_job(FunctionCallInfo fcinfo, text **queue, Oid *owner)
{
	Datum		values[4];
	char		nulls[4] = "    ";
	TimestampTz now = GetCurrentTimestamp();
	bool		done;

	values[0] = PG_GETARG_DATUM(0);
	values[1] = PG_GETARG_DATUM(1);
	values[2] = TimestampTzGetDatum(now);
	values[3] = PG_ARGISNULL(2) ? (Datum) 0 : PG_GETARG_DATUM(2);
	nulls[3] = PG_ARGISNULL(2) ? 'n' : ' ';
	if (queue_complete_direct(values[0], values[1], values[3], PG_ARGISNULL(2),
						   now, &done, queue, owner))
		return done;

	done = dl_exec(queue_keeps_completed() ?
				   &complete_held_stmt : &complete_delete_stmt,
				   values, nulls, 0) == 1;
	if (done && queue)
	{
		bool		isnull;

		/* detoasted, as the direct path gives it */
		*queue = DatumGetTextPCopy(dl_getattr(0, 1, &isnull));
		*owner = DatumGetObjectId(dl_getattr(0, 2, &isnull));
	}
	return done;
}

/*
 * complete(job_id bigint, session_id uuid, result jsonb DEFAULT NULL)
 *		RETURNS boolean
 *
 * Acknowledge a job: true if it was running, claimed by session_id, and the
 * session is live now; the job is then completed with result (deleted, with
 * distlock.delete_completed: queue_keeps_completed()).  Otherwise
 * false, changing nothing.  An unknown job_id raises 42704, a session of
 * another role 42501.
 *
 * The session is checked as every call of a session checks it
 * (dl_session_acting(): a session that seemed expired is checked again
 * under its beat lock, so that a heartbeat committed just before cannot
 * make a live session's acknowledgement fail; another role's raises
 * 42501), and
 * the job is then completed if it is running for the session
 * (queue_complete_job()).
 */
Datum
distlock_complete(PG_FUNCTION_ARGS)
{
	DistlockCall call;
	bool		done = false;

	dl_arg_not_null(fcinfo, 0, "job_id");
	dl_arg_not_null(fcinfo, 1, "session_id");

	dl_enter(&call, "distlock.complete()", true);
	if (!PG_ARGISNULL(2))
		dl_limit_size(PG_GETARG_DATUM(2), "result", call.caller);
	if (dl_session_acting(&call, PG_GETARG_DATUM(1)))
		done = queue_complete_job(fcinfo, NULL, NULL);
	if (!done)
		queue_job_check(&call, PG_GETARG_DATUM(0), false);
	dl_leave(&call);

	PG_RETURN_BOOL(done);
}

/*
 * The job_ids and session_id arguments of a batch's acknowledgement:
 * neither null, no null id, at most DISTLOCK_MAX_CLAIM_JOBS ids.  Returns
 * the ids.
 */
static ArrayType *
queue_batch_arg(FunctionCallInfo fcinfo)
{
	ArrayType  *ids;

	dl_arg_not_null(fcinfo, 0, "job_ids");
	dl_arg_not_null(fcinfo, 1, "session_id");
	ids = PG_GETARG_ARRAYTYPE_P(0);
	if (array_contains_nulls(ids))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("job_ids cannot contain nulls")));
	if (ArrayGetNItems(ARR_NDIM(ids), ARR_DIMS(ids)) > DISTLOCK_MAX_CLAIM_JOBS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("job_ids must have at most %d elements",
						DISTLOCK_MAX_CLAIM_JOBS)));
	return ids;
}

/* The result argument (the third) of a batch's acknowledgement. */
static NullableDatum
queue_result_arg(FunctionCallInfo fcinfo)
{
	NullableDatum result;

	result.isnull = PG_ARGISNULL(2);
	result.value = result.isnull ? (Datum) 0 : PG_GETARG_DATUM(2);
	return result;
}

/*
 * complete_batch(job_ids bigint[], session_id uuid, result jsonb DEFAULT
 *				  NULL) RETURNS SETOF bigint
 *
 * Acknowledge each of up to DISTLOCK_MAX_CLAIM_JOBS jobs as complete()
 * does, in one statement, and return the ids acknowledged (in id order): a
 * job is completed, with result, if it is running and claimed by
 * session_id and the session is live now; the others are left as they
 * are.  The caller compares: whatever it wrote for a job not returned must
 * not commit.  An id that is no job raises 42704, a null id 22004.
 */
Datum
distlock_complete_batch(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	DistlockCall call;
	ArrayType  *ids = queue_batch_arg(fcinfo);
	int			nids = ArrayGetNItems(ARR_NDIM(ids), ARR_DIMS(ids));
	BatchAck	ack = {0};

	/* a set of bigint: the caller's descriptor of one column */
	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	ack.ids = rsinfo->setResult;
	ack.desc = rsinfo->setDesc;

	dl_enter(&call, "distlock.complete_batch()", true);
	if (!PG_ARGISNULL(2))
		dl_limit_size(PG_GETARG_DATUM(2), "result", call.caller);
	if (dl_session_acting(&call, PG_GETARG_DATUM(1)) && nids > 0)
		queue_complete_batch(&ack, ids, PG_GETARG_DATUM(1),
							 queue_result_arg(fcinfo));
	/*
	 * Fewer than asked for (duplicates counted, which costs at most a look
	 * that finds nothing): an id that is no job (of ours) is an error.
	 */
	if (ack.n < (uint64) nids)
		queue_batch_check(&call, &ack, ids);
	dl_leave(&call);

	return (Datum) 0;
}

/*
 * complete_batch_and_claim(job_ids bigint[], session_id uuid, result jsonb
 *							DEFAULT NULL, max_jobs integer DEFAULT NULL)
 *		RETURNS SETOF distlock.jobs
 *
 * A batch worker's loop in one call: acknowledge every job of job_ids as
 * complete_batch() does, then claim up to max_jobs (NULL: as many as were
 * acknowledged) due jobs of their queue as claim() does, in one
 * transaction.  The batch is acknowledged whole or the call fails: a job
 * not acknowledged raises 55000 (42704 if it is no job the caller may
 * see), so that whatever the worker wrote for the batch in the same
 * transaction rolls back with it and nothing is claimed; jobs of more than
 * one queue raise 22023, for there would be no one queue to claim from.  A
 * session that is not live raises 42704 or 55000, as in claim().
 */
Datum
distlock_complete_batch_and_claim(PG_FUNCTION_ARGS)
{
	DistlockCall call;
	ArrayType  *ids = queue_batch_arg(fcinfo);
	int			nids = ArrayGetNItems(ARR_NDIM(ids), ARR_DIMS(ids));
	int32		max_jobs = 0;
	BatchAck	ack = {0};
	TimestampTz expires;
	bool		reap;

	if (nids == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("job_ids must not be empty"),
				 errhint("Claim the first batch with claim().")));
	if (!PG_ARGISNULL(3))
		max_jobs = dl_arg_int_range(fcinfo, 3, "max_jobs", 1,
									DISTLOCK_MAX_CLAIM_JOBS);

	InitMaterializedSRF(fcinfo, 0);

	dl_enter(&call, "distlock.complete_batch_and_claim()", true);
	if (!PG_ARGISNULL(2))
		dl_limit_size(PG_GETARG_DATUM(2), "result", call.caller);
	reap = dl_session_use(&call, PG_GETARG_DATUM(1), &expires);
	ack.want_queue = true;
	queue_complete_batch(&ack, ids, PG_GETARG_DATUM(1), queue_result_arg(fcinfo));

	/* every job of the batch, each once */
	if (ack.n < (uint64) ack.asked)
	{
		queue_batch_check(&call, &ack, ids);
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg_plural("%d job of the batch is not running for session \"%s\"",
							   "%d jobs of the batch are not running for session \"%s\"",
							   ack.asked - (int) ack.n, ack.asked - (int) ack.n,
							   DatumGetCString(DirectFunctionCall1(uuid_out,
																   PG_GETARG_DATUM(1)))),
				 errdetail_plural("It was completed, failed or cancelled, or handed back to the queue after its session expired or closed.",
								  "They were completed, failed or cancelled, or handed back to the queue after their session expired or closed.",
								  ack.asked - (int) ack.n),
				 errhint("Roll back what was done for the batch: its acknowledgement was refused.")));
	}
	if (ack.mixed)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the jobs of the batch are of more than one queue"),
				 errhint("Acknowledge them with complete_batch(), and claim from each queue with claim().")));

	/*
	 * The claim privilege may have been revoked since the jobs were claimed:
	 * the acknowledgement stands, and nothing more is claimed.
	 */
	if (dl_queue_allowed(&call, ack.owner, PointerGetDatum(ack.queue),
						 DL_QUEUE_CLAIM))
		queue_claim(&call, fcinfo, ack.owner, PointerGetDatum(ack.queue),
					PG_GETARG_DATUM(1), max_jobs > 0 ? max_jobs : (int32) ack.n,
					expires, reap);
	dl_leave(&call);

	return (Datum) 0;
}

/*
 * complete_and_claim(job_id bigint, session_id uuid, result jsonb DEFAULT
 *					  NULL, max_jobs integer DEFAULT 1)
 *		RETURNS SETOF distlock.jobs
 *
 * A worker's loop in one call: acknowledge job_id as complete() does, then
 * claim up to max_jobs due jobs of the same queue as claim() does, in one
 * transaction.  A refused acknowledgement is an error, 55000, so that
 * whatever the worker wrote for the job in the same transaction rolls back
 * with it and nothing is claimed; an unknown job raises 42704, and a session
 * that is not live 42704 or 55000, as in claim().
 */
Datum
distlock_complete_and_claim(PG_FUNCTION_ARGS)
{
	DistlockCall call;
	int32		max_jobs;
	text	   *queue;
	Oid			owner;
	TimestampTz expires;
	bool		reap;

	dl_arg_not_null(fcinfo, 0, "job_id");
	dl_arg_not_null(fcinfo, 1, "session_id");
	max_jobs = dl_arg_int_range(fcinfo, 3, "max_jobs", 1,
								DISTLOCK_MAX_CLAIM_JOBS);

	InitMaterializedSRF(fcinfo, 0);

	dl_enter(&call, "distlock.complete_and_claim()", true);
	if (!PG_ARGISNULL(2))
		dl_limit_size(PG_GETARG_DATUM(2), "result", call.caller);
	reap = dl_session_use(&call, PG_GETARG_DATUM(1), &expires);
	if (!queue_complete_job(fcinfo, &queue, &owner))
	{
		queue_job_check(&call, PG_GETARG_DATUM(0), false);
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("job " INT64_FORMAT " is not running for session \"%s\"",
						PG_GETARG_INT64(0),
						DatumGetCString(DirectFunctionCall1(uuid_out,
															PG_GETARG_DATUM(1)))),
				 errdetail("It was completed, failed or cancelled, or handed back to the queue after its session expired or closed."),
				 errhint("Roll back what was done for the job: its acknowledgement was refused.")));
	}
	/*
	 * The claim privilege may have been revoked since the job was claimed:
	 * the acknowledgement stands, and nothing more is claimed.
	 */
	if (dl_queue_allowed(&call, owner, PointerGetDatum(queue), DL_QUEUE_CLAIM))
		queue_claim(&call, fcinfo, owner, PointerGetDatum(queue),
					PG_GETARG_DATUM(1), max_jobs, expires, reap);
	dl_leave(&call);

	return (Datum) 0;
}

/*
 * fail(job_id bigint, session_id uuid, error text DEFAULT NULL,
 *		retry_in interval DEFAULT NULL) RETURNS boolean
 *
 * Report a failed attempt, under the same rule as complete().  The job goes
 * back to pending, due after retry_in (NULL: exponential backoff with
 * jitter), or becomes failed once it has been claimed max_attempts times.
 */
Datum
distlock_fail(PG_FUNCTION_ARGS)
{
	DistlockCall call;
	Datum		values[6];
	char		nulls[6] = "      ";
	bool		done = false;

	dl_arg_not_null(fcinfo, 0, "job_id");
	dl_arg_not_null(fcinfo, 1, "session_id");
	values[0] = PG_GETARG_DATUM(0);
	values[1] = PG_GETARG_DATUM(1);
	values[3] = PG_ARGISNULL(2) ? (Datum) 0 : PG_GETARG_DATUM(2);
	nulls[3] = PG_ARGISNULL(2) ? 'n' : ' ';
	values[4] = PG_ARGISNULL(3) ? (Datum) 0 :
		PointerGetDatum(dl_arg_interval(fcinfo, 3, "retry_in", true));
	nulls[4] = PG_ARGISNULL(3) ? 'n' : ' ';
	values[5] = Float8GetDatum(0.5 + pg_prng_double(&pg_global_prng_state) / 2);

	dl_enter(&call, "distlock.fail()", true);
	if (!PG_ARGISNULL(2))
		dl_limit_size(PG_GETARG_DATUM(2), "error", call.caller);
	if (dl_session_acting(&call, values[1]))
	{
		values[2] = TimestampTzGetDatum(GetCurrentTimestamp());
		done = dl_exec(&fail_stmt, values, nulls, 0) == 1;
		dl_wake_for_jobs_back();
	}
	if (!done)
		queue_job_check(&call, values[0], false);
	dl_leave(&call);

	PG_RETURN_BOOL(done);
}

/*
 * For the cancel of a job's creator, which may cancel it only while
 * pending, at READ COMMITTED: lock the job's latest committed version if
 * it is pending, that version only (dl_version_lock()), and say whether it
 * was.  The cancel's UPDATE alone would, for a job claimed since its
 * snapshot, lock the running version before finding it no longer pending,
 * and keep it locked until this transaction ends: the worker's
 * acknowledgement would wait for the producer.
 */
static bool
queue_lock_pending(Datum job_id)
{
	const DistlockCatalog *cat = dl_catalog();

	for (;;)
	{
		LatestRead	lr;
		ItemPointerData tid;
		TransactionId xmin = InvalidTransactionId;
		bool		pending = false;
		bool		isnull;

		CHECK_FOR_INTERRUPTS();
		dl_latest_open(&lr, cat->jobs, AccessShareLock);
		dl_latest_scan(&lr, cat->jobs_pkey, BTEqualStrategyNumber, F_INT8EQ,
					   job_id);
		if (dl_latest_next(&lr))
		{
			pending = DatumGetObjectId(slot_getattr(lr.slot, cat->job_status,
													&isnull)) ==
				cat->status_pending;
			tid = lr.slot->tts_tid;
			xmin = DatumGetTransactionId(slot_getsysattr(lr.slot,
														 MinTransactionIdAttributeNumber,
														 &isnull));
		}
		dl_latest_close(&lr);
		if (!pending)
			return false;
		/* changed since it was read: read it again */
		if (dl_version_lock(cat->jobs, &tid, xmin, LockTupleNoKeyExclusive))
			return true;
	}
}

/*
 * cancel(job_id bigint) RETURNS boolean
 *
 * Cancel a pending or running job: true if it was, false if it had already
 * finished.  A later complete() or fail() of it returns false.  An unknown
 * job_id raises 42704.  A job's creator that does not manage its queue
 * cancels it only while pending (false once claimed): otherwise a
 * producer's open transaction could hold the row a worker's
 * acknowledgement must update.
 */
Datum
distlock_cancel(PG_FUNCTION_ARGS)
{
	DistlockCall call;
	Datum		values[3];
	bool		done;

	dl_arg_not_null(fcinfo, 0, "job_id");
	values[0] = PG_GETARG_DATUM(0);

	dl_enter(&call, "distlock.cancel()", true);
	values[2] = BoolGetDatum(queue_job_check(&call, values[0], true));
	values[1] = TimestampTzGetDatum(GetCurrentTimestamp());
	/*
	 * (At REPEATABLE READ the UPDATE raises 40001 for a changed job; with a
	 * rule or forced row security on the table, it may not find what the
	 * lock took.)
	 */
	if (DatumGetBool(values[2]) || IsolationUsesXactSnapshot() ||
		!dl_table_plain(dl_catalog()->jobs) || queue_lock_pending(values[0]))
		done = dl_exec(&cancel_stmt, values, NULL, 0) == 1;
	else
		done = false;
	dl_leave(&call);

	PG_RETURN_BOOL(done);
}
