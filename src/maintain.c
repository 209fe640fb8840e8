/*-------------------------------------------------------------------------
 *
 * maintain.c
 *		maintain(): reaping, and retention of finished jobs and free locks.
 *
 * What grows without it: a job row stays after the job has finished
 * (completed, failed for good, cancelled), and a lock row after its lease
 * has ended, so that its fencing history stays with the name.  maintain()
 * deletes finished jobs older than distlock.job_retention and lock rows
 * that have been free for longer than distlock.lock_retention, and reaps
 * expired sessions, so that their jobs go back to their queues without a
 * worker calling in.  The background worker (worker.c) calls it in every
 * database where distlock is installed; without the worker, an
 * administrator (access.c: the extension's or the database's owner, or a
 * role with their privileges; pg_cron as one) runs it.
 *
 * Only administrators: the deletions are made in the caller's transaction,
 * and a lock row deleted in a transaction left open makes every call that
 * would take that lock wait for it (a grant must know whether the row it
 * judged free is gone), so an ordinary role could stall other roles' locks.
 * Otherwise the deletions take nothing a claim or an acknowledgement
 * waits for: the rows are locked FOR UPDATE SKIP LOCKED (a row somebody
 * holds is left for a later pass), and a finished job is never claimed or
 * acknowledged again.  Each pass reaps at most DISTLOCK_PRUNE_BATCH
 * sessions and deletes at most as many rows of each table, so its
 * transaction stays short (the jobs a reap hands back are pending only
 * once it commits); the worker runs passes back to back while they come
 * back full.
 *
 * Deleting a free lock row changes nothing a caller can observe: the row
 * is not in active_locks, the next grant of the name draws its token from
 * the one sequence, so it is still larger than every token handed out
 * before, and fence() refuses a stale token with the same error whether
 * or not the row is there.  A row is kept while its minimum hold lasts.
 * One thing only ends with the row: the owner of a lease that expired
 * (and was not taken since) can renew it with its token until then, and
 * must acquire it again after.
 * Lock rows have no index to find the free ones by (one would cost every
 * grant and release its HOT update), so they are found by a scan of the
 * table; the background worker asks for it only once a minute, unless
 * the last one came back full (maintain(prune_locks => false) otherwise).
 *
 * After a restore or pg_upgrade into another cluster it also rebases the
 * fencing token epoch (token.c), before which no lease is granted: first,
 * so that the worker's first pass does it.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/maintain.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "utils/timestamp.h"

#include "distlock.h"

PG_FUNCTION_INFO_V1(distlock_maintain);


/* distlock.job_retention, distlock.lock_retention: see distlock.c */
int			dl_job_retention = 86400;
int			dl_lock_retention = 86400;

/* Finished jobs that finished before $1, oldest first. */
static DistlockStmt prune_jobs_stmt = {
	"DELETE FROM distlock.jobs WHERE id = ANY (ARRAY("
	" SELECT id FROM distlock.jobs"
	" WHERE status > 'running' AND finished_at < $1"
	" ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED))",
	2, {TIMESTAMPTZOID, INT4OID}
};

/*
 * Lock rows free since before $1 and off hold: released, expired, or bound
 * to a session whose row is gone (reaped or closed, which only happens
 * once it has ended: a session row that is there, even expired, may still
 * be judged live by a heartbeat in flight, session.c).  renewed_at, the
 * release or the last grant or renewal, bounds when the lease last moved.
 */
static DistlockStmt prune_locks_stmt = {
	"DELETE FROM distlock.locks WHERE name = ANY (ARRAY("
	" SELECT name FROM distlock.locks l"
	" WHERE (hold_until IS NULL OR hold_until < $1)"
	" AND (owner IS NULL AND renewed_at < $1"
	"  OR expires_at < $1"
	"  OR session_id IS NOT NULL AND renewed_at < $1"
	"   AND NOT EXISTS (SELECT 1 FROM distlock.sessions s"
	"    WHERE s.id = l.session_id))"
	" LIMIT $2 FOR UPDATE SKIP LOCKED))",
	2, {TIMESTAMPTZOID, INT4OID}
};

/* Delete with stmt up to DISTLOCK_PRUNE_BATCH rows older than cutoff. */
static int
maintain_prune(DistlockStmt *stmt, TimestampTz cutoff)
{
	Datum		values[2];

	values[0] = TimestampTzGetDatum(cutoff);
	values[1] = Int32GetDatum(DISTLOCK_PRUNE_BATCH);
	return (int) dl_exec(stmt, values, NULL, 0);
}

/*
 * maintain(prune_locks boolean DEFAULT true, OUT reaped integer,
 *			OUT jobs_pruned integer, OUT locks_pruned integer) RETURNS record
 *
 * One pass: reap up to DISTLOCK_PRUNE_BATCH expired sessions not in use,
 * delete up to as many finished jobs that finished more than
 * distlock.job_retention ago and, with prune_locks, as many lock rows free
 * for more than distlock.lock_retention (-1: keep them).  Returns the
 * numbers; a full batch means there is more to do.
 */
Datum
distlock_maintain(PG_FUNCTION_ARGS)
{
	DistlockCall call;
	TupleDesc	desc;
	Datum		values[3] = {0};
	bool		nulls[3] = {false, false, false};
	TimestampTz now;
	bool		prune_locks;

	dl_arg_not_null(fcinfo, 0, "prune_locks");
	prune_locks = PG_GETARG_BOOL(0);
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	dl_enter(&call, "distlock.maintain()", true);
	dl_require_admin(&call, "maintain");
	(void) dl_token_rebase();
	values[0] = Int32GetDatum(dl_reap_some(&call, DISTLOCK_PRUNE_BATCH));
	now = GetCurrentTimestamp();
	values[1] = Int32GetDatum(dl_job_retention < 0 ? 0 :
							  maintain_prune(&prune_jobs_stmt,
											 now - dl_job_retention * USECS_PER_SEC));
	if (dl_lock_retention >= 0 && prune_locks)
		values[2] = Int32GetDatum(maintain_prune(&prune_locks_stmt,
												 now - dl_lock_retention * USECS_PER_SEC));
	dl_leave(&call);

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc),
													  values, nulls)));
}
