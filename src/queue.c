/*-------------------------------------------------------------------------
 *
 * queue.c
 *		The job queue: enqueue, claim, complete, fail, cancel.
 *
 * A job is a row of distlock.jobs.  claim() moves due pending jobs to
 * running for a live session in one statement that selects them with FOR
 * UPDATE SKIP LOCKED, so concurrent claimers never wait for each other and
 * never receive the same job.  Before claiming, it reaps sessions that have
 * expired, so their running jobs are claimable at once whether or not
 * reap() has run.
 *
 * Exactly-once acknowledgement: complete() and fail() first lock the
 * caller's session row FOR KEY SHARE and check, on the clock read after that
 * lock, that the session is live; then they change the job only if it is
 * still running and claimed by that session.  Reaping and closing lock the
 * session FOR UPDATE, so they wait for an acknowledgement in flight and then
 * find the job no longer running; an acknowledgement that comes after the
 * session was reaped finds the session gone.  Either way exactly one of them
 * takes effect, and the worker's own writes in the acknowledging transaction
 * commit only with an accepted acknowledgement.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/queue.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/pg_prng.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

#include "distlock.h"

PG_FUNCTION_INFO_V1(distlock_enqueue);
PG_FUNCTION_INFO_V1(distlock_claim);
PG_FUNCTION_INFO_V1(distlock_complete);
PG_FUNCTION_INFO_V1(distlock_fail);
PG_FUNCTION_INFO_V1(distlock_cancel);

/* The predicate of jobs_dedup_idx, which ON CONFLICT must name. */
#define DEDUP_PREDICATE \
	"dedup_key IS NOT NULL AND status <= 'running'::distlock.job_status"

static DistlockStmt insert_stmt = {
	"INSERT INTO distlock.jobs (queue, payload, status, priority, run_at,"
	" attempts, max_attempts, dedup_key, created_at, created_by)"
	" VALUES ($1, $2, 'pending', $3, $4, 0, $5, $6, $7, $8)"
	" ON CONFLICT (queue, dedup_key) WHERE " DEDUP_PREDICATE
	" DO NOTHING RETURNING id",
	8, {TEXTOID, JSONBOID, INT4OID, TIMESTAMPTZOID, INT4OID, TEXTOID,
	TIMESTAMPTZOID, REGROLEOID}
};

static DistlockStmt find_dedup_stmt = {
	"SELECT id, created_by FROM distlock.jobs"
	" WHERE queue = $1 AND dedup_key = $2 AND " DEDUP_PREDICATE,
	2, {TEXTOID, TEXTOID}
};

/*
 * Claim order is priority (higher first), run_at, id: a walk of
 * jobs_claim_idx from its start for the queue, skipping rows that other
 * claimers hold, and jobs of roles the caller ($5) may not act for unless
 * it is an administrator ($6).
 */
static DistlockStmt claim_stmt = {
	"WITH picked AS ("
	"  SELECT id FROM distlock.jobs"
	"  WHERE queue = $1 AND status = 'pending' AND run_at <= $3"
	"   AND ($6 OR pg_has_role($5, created_by, 'USAGE'))"
	"  ORDER BY priority DESC, run_at, id"
	"  LIMIT $4 FOR UPDATE SKIP LOCKED),"
	" claimed AS ("
	"  UPDATE distlock.jobs j SET status = 'running', session_id = $2,"
	"   claimed_at = $3, attempts = j.attempts + 1"
	"  FROM picked WHERE j.id = picked.id RETURNING j.*)"
	" SELECT * FROM claimed ORDER BY priority DESC, run_at, id",
	6, {TEXTOID, UUIDOID, TIMESTAMPTZOID, INT4OID, OIDOID, BOOLOID}
};

static DistlockStmt complete_stmt = {
	"UPDATE distlock.jobs SET status = 'completed', finished_at = $3,"
	" result = $4"
	" WHERE id = $1 AND session_id = $2 AND status = 'running'",
	4, {INT8OID, UUIDOID, TIMESTAMPTZOID, JSONBOID}
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
	" WHERE id = $1 AND session_id = $2 AND status = 'running'",
	6, {INT8OID, UUIDOID, TIMESTAMPTZOID, TEXTOID, INTERVALOID, FLOAT8OID}
};

static DistlockStmt cancel_stmt = {
	"UPDATE distlock.jobs SET status = 'cancelled', finished_at = $2"
	" WHERE id = $1 AND status <= 'running'",
	2, {INT8OID, TIMESTAMPTZOID}
};

static DistlockStmt creator_stmt = {
	"SELECT created_by FROM distlock.jobs WHERE id = $1",
	1, {INT8OID}
};

/*
 * The role that enqueued job_id.  Raises 42704 if there is no such job, so
 * that a wrong id is not mistaken for a refusal.
 */
static Oid
queue_job_creator(Datum job_id)
{
	Datum		values[1] = {job_id};
	bool		isnull;

	if (dl_exec(&creator_stmt, values, NULL, 1) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("job " INT64_FORMAT " does not exist",
						DatumGetInt64(job_id))));
	return DatumGetObjectId(dl_getattr(0, 1, &isnull));
}

/* A job id as messages show it. */
static char *
queue_job_label(int64 id)
{
	return psprintf(INT64_FORMAT, id);
}

/*
 * enqueue(queue text, payload jsonb DEFAULT '{}', run_at timestamptz
 *		   DEFAULT NULL, priority integer DEFAULT 0, max_attempts integer
 *		   DEFAULT 5, dedup_key text DEFAULT NULL) RETURNS bigint
 *
 * Add a pending job due at run_at (NULL: now) and return its id.  If a job
 * with the same dedup_key is pending or running in the queue, return its id
 * and add nothing.
 */
Datum
distlock_enqueue(PG_FUNCTION_ARGS)
{
	text	   *queue = dl_arg_name(fcinfo, 0, "queue name");
	text	   *dedup_key;
	DistlockCall call;
	Datum		values[8];
	char		nulls[8] = "        ";
	TimestampTz now;
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
	now = GetCurrentTimestamp();
	values[3] = PG_ARGISNULL(2) ? TimestampTzGetDatum(now) : PG_GETARG_DATUM(2);
	values[6] = TimestampTzGetDatum(now);
	values[7] = ObjectIdGetDatum(call.caller);

	/*
	 * On a dedup conflict, return the job we conflicted with.  Should it have
	 * finished before we look, insert again.  (At REPEATABLE READ a
	 * conflict with a job our snapshot cannot see raises 40001 instead.)
	 */
	for (;;)
	{
		Datum		dedup_values[2] = {values[0], values[5]};
		bool		isnull;

		if (dl_exec(&insert_stmt, values, nulls, 0) == 1)
		{
			id = dl_getint64(0, 1);
			break;
		}
		if (dl_exec(&find_dedup_stmt, dedup_values, NULL, 1) == 1)
		{
			/* another role's job is not ours to see */
			id = dl_getint64(0, 1);
			dl_check_access(&call,
							DatumGetObjectId(dl_getattr(0, 2, &isnull)),
							"job", queue_job_label(id));
			break;
		}
		CHECK_FOR_INTERRUPTS();
	}
	dl_leave(&call);

	PG_RETURN_INT64(id);
}

/*
 * claim(queue text, session_id uuid, max_jobs integer DEFAULT 1)
 *		RETURNS SETOF distlock.jobs
 *
 * Move up to max_jobs (1 to DISTLOCK_MAX_CLAIM_JOBS) due pending jobs of the
 * queue to running for the session, in claim order, and return them as they
 * now are.  Never waits for another claimer.  A session that is not live
 * raises 42704 or 55000.
 */
Datum
distlock_claim(PG_FUNCTION_ARGS)
{
	text	   *queue = dl_arg_name(fcinfo, 0, "queue name");
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	DistlockCall call;
	Datum		values[6];
	TimestampTz now;
	uint64		n;

	dl_arg_not_null(fcinfo, 1, "session_id");
	values[0] = PointerGetDatum(queue);
	values[1] = PG_GETARG_DATUM(1);
	values[3] = Int32GetDatum(dl_arg_int_range(fcinfo, 2, "max_jobs", 1,
											   DISTLOCK_MAX_CLAIM_JOBS));

	InitMaterializedSRF(fcinfo, 0);

	dl_enter(&call, "distlock.claim()", true);
	dl_session_use(&call, values[1]);
	values[4] = ObjectIdGetDatum(call.caller);
	values[5] = BoolGetDatum(dl_caller_is_admin(&call));
	now = GetCurrentTimestamp();
	dl_reap_expired(now, DISTLOCK_REAP_BATCH);
	values[2] = TimestampTzGetDatum(now);
	n = dl_exec(&claim_stmt, values, NULL, 0);

	if (SPI_tuptable->tupdesc->natts != rsinfo->setDesc->natts)
		elog(ERROR, "claim returned %d columns, expected %d",
			 SPI_tuptable->tupdesc->natts, rsinfo->setDesc->natts);
	for (uint64 i = 0; i < n; i++)
		tuplestore_puttuple(rsinfo->setResult, SPI_tuptable->vals[i]);
	dl_leave(&call);

	return (Datum) 0;
}

/*
 * complete(job_id bigint, session_id uuid, result jsonb DEFAULT NULL)
 *		RETURNS boolean
 *
 * Acknowledge a job: true if it was running, claimed by session_id, and the
 * session is live now; the job is then completed with result.  Otherwise
 * false, changing nothing.  An unknown job_id raises 42704.
 */
Datum
distlock_complete(PG_FUNCTION_ARGS)
{
	DistlockCall call;
	Datum		values[4];
	char		nulls[4] = "    ";
	bool		done = false;

	dl_arg_not_null(fcinfo, 0, "job_id");
	dl_arg_not_null(fcinfo, 1, "session_id");
	values[0] = PG_GETARG_DATUM(0);
	values[1] = PG_GETARG_DATUM(1);
	values[3] = PG_ARGISNULL(2) ? (Datum) 0 : PG_GETARG_DATUM(2);
	nulls[3] = PG_ARGISNULL(2) ? 'n' : ' ';

	dl_enter(&call, "distlock.complete()", true);
	if (dl_session_acting(&call, values[1]))
	{
		values[2] = TimestampTzGetDatum(GetCurrentTimestamp());
		done = dl_exec(&complete_stmt, values, nulls, 0) == 1;
	}
	if (!done)
		(void) queue_job_creator(values[0]);
	dl_leave(&call);

	PG_RETURN_BOOL(done);
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
	if (dl_session_acting(&call, values[1]))
	{
		values[2] = TimestampTzGetDatum(GetCurrentTimestamp());
		done = dl_exec(&fail_stmt, values, nulls, 0) == 1;
	}
	if (!done)
		(void) queue_job_creator(values[0]);
	dl_leave(&call);

	PG_RETURN_BOOL(done);
}

/*
 * cancel(job_id bigint) RETURNS boolean
 *
 * Cancel a pending or running job: true if it was, false if it had already
 * finished.  A later complete() or fail() of it returns false.  An unknown
 * job_id raises 42704.
 */
Datum
distlock_cancel(PG_FUNCTION_ARGS)
{
	DistlockCall call;
	Datum		values[2];
	bool		done;

	dl_arg_not_null(fcinfo, 0, "job_id");
	values[0] = PG_GETARG_DATUM(0);

	dl_enter(&call, "distlock.cancel()", true);
	dl_check_access(&call, queue_job_creator(values[0]), "job",
					queue_job_label(DatumGetInt64(values[0])));
	values[1] = TimestampTzGetDatum(GetCurrentTimestamp());
	done = dl_exec(&cancel_stmt, values, NULL, 0) == 1;
	dl_leave(&call);

	PG_RETURN_BOOL(done);
}
