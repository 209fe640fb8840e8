/*-------------------------------------------------------------------------
 *
 * views.c
 *		The rows behind the views live_sessions, active_locks, queue_stats.
 *
 * Each view shows a role only the rows of roles whose privileges it has
 * (access.c).  Were the view a filter over the table, EXPLAIN ANALYZE of it
 * would count the rows the filter removed ("Rows Removed by Filter"),
 * telling any role how many locks, sessions and jobs the other roles have.
 * So each view reads a function that runs the view's query as the schema
 * owner, as the API functions do (exec.c), with the caller's filter inside
 * it: all the caller can see of it is the rows it returns.
 *
 * The queries read the caller's snapshot, as a view in its query would,
 * and judge liveness on clock_timestamp(), like the functions.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/views.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/guc.h"

#include "distlock.h"

PG_FUNCTION_INFO_V1(distlock_live_sessions_rows);
PG_FUNCTION_INFO_V1(distlock_active_locks_rows);
PG_FUNCTION_INFO_V1(distlock_queue_stats_rows);

static DistlockStmt live_sessions_stmt = {
	"SELECT s.id, s.owner, s.info, s.ttl, s.created_at,"
	" CASE WHEN e.at = s.expires_at THEN s.heartbeat_at"
	"  ELSE e.at - s.ttl END,"
	" e.at, e.at - clock_timestamp(), s.created_by"
	" FROM distlock.sessions s,"
	" LATERAL (SELECT distlock.session_expiry(s.id, s.expires_at) AS at) e"
	" WHERE e.at > clock_timestamp()"
	" AND distlock.may_act_for($1, s.created_by)",
	1, {REGROLEOID}
};

/*
 * A lock is shown while it blocks other owners: while its holder's claim
 * is intact (an owner, and a live session if bound to one) and unexpired,
 * or while its minimum hold lasts (see sql/distlock--1.0.sql).
 */
static DistlockStmt active_locks_stmt = {
	"SELECT l.name,"
	" CASE WHEN c.intact THEN l.owner END,"
	" CASE WHEN c.intact THEN l.session_id END,"
	" l.token, l.acquired_at, l.renewed_at,"
	" CASE WHEN c.intact THEN l.expires_at END,"
	" CASE WHEN c.intact AND l.expires_at IS NULL THEN NULL"
	"  WHEN c.intact THEN GREATEST(l.expires_at, l.hold_until)"
	"  ELSE l.hold_until END - clock_timestamp(),"
	" l.hold_until, l.created_by"
	" FROM distlock.locks l,"
	" LATERAL (SELECT l.owner IS NOT NULL AND (l.session_id IS NULL"
	"  OR EXISTS (SELECT 1 FROM distlock.sessions s"
	"   WHERE s.id = l.session_id"
	"   AND distlock.session_expiry(s.id, s.expires_at) > clock_timestamp()))"
	"  AS intact) c"
	" WHERE ((c.intact AND (l.expires_at IS NULL"
	"  OR l.expires_at > clock_timestamp()))"
	"  OR l.hold_until > clock_timestamp())"
	" AND distlock.may_act_for($1, l.created_by)",
	1, {REGROLEOID}
};

static DistlockStmt queue_stats_stmt = {
	"SELECT j.queue,"
	" count(*) FILTER (WHERE j.status = 'pending'),"
	" count(*) FILTER (WHERE j.status = 'running'),"
	" count(*) FILTER (WHERE j.status = 'completed'),"
	" count(*) FILTER (WHERE j.status = 'failed'),"
	" count(*) FILTER (WHERE j.status = 'cancelled'),"
	" clock_timestamp() - min(j.run_at) FILTER (WHERE j.status = 'pending'"
	"  AND j.run_at <= clock_timestamp()),"
	" j.queue_owner::regrole"
	" FROM distlock.jobs j"
	" WHERE " DL_JOB_VISIBLE("$1", "j")
	" GROUP BY j.queue_owner, j.queue",
	1, {REGROLEOID}
};

/* Return the rows of stmt, for the calling role, as the function's set. */
static Datum
views_rows(FunctionCallInfo fcinfo, DistlockStmt *stmt, const char *fname)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	DistlockCall call;
	Datum		values[1];
	uint64		n;

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	dl_enter(&call, fname, false);
	/* every row the caller may see: a scan may be the plan (exec.c) */
	(void) set_config_option("enable_seqscan", "on",
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
							 true, 0, false);
	values[0] = ObjectIdGetDatum(call.caller);
	n = dl_exec_read(stmt, values, NULL);
	for (uint64 i = 0; i < n; i++)
	{
		int			natts = rsinfo->setDesc->natts;
		Datum	   *row = palloc(natts * sizeof(Datum));
		bool	   *nulls = palloc(natts * sizeof(bool));

		for (int c = 0; c < natts; c++)
			row[c] = dl_getattr(i, c + 1, &nulls[c]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, row, nulls);
	}
	dl_leave(&call);
	return (Datum) 0;
}

Datum
distlock_live_sessions_rows(PG_FUNCTION_ARGS)
{
	return views_rows(fcinfo, &live_sessions_stmt,
					  "distlock.live_sessions_rows()");
}

Datum
distlock_active_locks_rows(PG_FUNCTION_ARGS)
{
	return views_rows(fcinfo, &active_locks_stmt,
					  "distlock.active_locks_rows()");
}

Datum
distlock_queue_stats_rows(PG_FUNCTION_ARGS)
{
	return views_rows(fcinfo, &queue_stats_stmt,
					  "distlock.queue_stats_rows()");
}
