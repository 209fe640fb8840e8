/*-------------------------------------------------------------------------
 *
 * admin.c
 *		A role's rows, for an administrator: reassign_owned, drop_owned.
 *
 * Every lock grant, session, job and throttle belongs to a role
 * (created_by; a throttle's owner), and so does every queue (its jobs'
 * queue_owner) and the grants on it.  DROP ROLE knows nothing of rows, so it
 * succeeds while the role still has some, leaving them under an OID that
 * no role has (and that a role created later could get).  As REASSIGN
 * OWNED and DROP OWNED do for objects, reassign_owned() gives a role's rows
 * to another role and drop_owned() removes them; run one of them in each
 * database with distlock before dropping the role.
 *
 * Who may: a role with the privileges of the role whose rows they are (and
 * of the receiving role, to reassign), which includes the extension's and
 * the database's owners (access.c).  A role may thus also clear out its
 * own rows.
 *
 * Neither function waits for anybody: rows another transaction holds
 * (a lease being renewed, a job being acknowledged, a session being
 * closed or heartbeated; and, to drop_owned(), a session with a call in
 * flight) are skipped, and counted only once done, so the caller sees
 * what is left and runs the function again.  A session reassigned while
 * a call of it is in flight keeps that call's judgement; its next call is
 * checked against the new role.  A role's sessions end as
 * session_close() ends them: their running jobs go back to pending (or
 * fail), their leases end with them.  Its leases are deleted, held or not
 * (their holders' renew then answers false, fence 55000), its jobs
 * deleted whatever their state (an acknowledgement of one then raises
 * 42704), its throttles deleted.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/admin.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/uuid.h"

#include "distlock.h"

PG_FUNCTION_INFO_V1(distlock_reassign_owned);
PG_FUNCTION_INFO_V1(distlock_drop_owned);

#define ADMIN_KINDS 5			/* sessions, locks, jobs, throttles, grants */

/*
 * The limit (limits.c) on the count of rows of each kind; jobs have none
 * (DL_LIMIT_PAYLOAD, a limit on sizes, stands for none).
 */
static const DistlockLimit admin_limits[ADMIN_KINDS] = {
	DL_LIMIT_SESSIONS, DL_LIMIT_LOCKS, DL_LIMIT_PAYLOAD, DL_LIMIT_THROTTLES,
	DL_LIMIT_GRANTS
};

/*
 * A running job is held by its worker, whose acknowledgement must update
 * it: only a role that may act for the job's queue may lock it (the queue's
 * owner, or an administrator), so that no producer cleaning up its own rows
 * in an open transaction holds up another role's worker.  $3 is the caller.
 */
#define ADMIN_JOB_MAY_LOCK \
	"(status <> 'running' OR distlock.may_act_for($3, queue_owner))"

static DistlockStmt reassign_stmts[ADMIN_KINDS] = {
	{"UPDATE distlock.sessions SET created_by = $2 WHERE id IN"
		" (SELECT id FROM distlock.sessions WHERE created_by = $1"
		" FOR UPDATE SKIP LOCKED)",
	3, {REGROLEOID, REGROLEOID, REGROLEOID}},
	{"UPDATE distlock.locks SET created_by = $2 WHERE name IN"
		" (SELECT name FROM distlock.locks WHERE created_by = $1"
		" FOR UPDATE SKIP LOCKED)",
	3, {REGROLEOID, REGROLEOID, REGROLEOID}},
	/*
	 * The role's jobs and the jobs of its queues.  A job whose dedup key
	 * the receiving role's queue of that name holds already is left, and
	 * so is all but the first of jobs with one key in a queue of no role
	 * ('-': rows restored from several missing roles may share one).  The
	 * pending ones wake the new queue's waiters.
	 */
	{"UPDATE distlock.jobs SET"
		" created_by = CASE WHEN created_by = $1 THEN $2::oid"
		"  ELSE created_by::oid END,"
		" queue_owner = CASE WHEN queue_owner = $1 THEN $2::oid"
		"  ELSE queue_owner::oid END"
		" WHERE id IN (SELECT id FROM distlock.jobs j"
		"  WHERE (created_by = $1 OR queue_owner = $1)"
		"  AND " ADMIN_JOB_MAY_LOCK
		"  AND NOT (queue_owner = $1 AND dedup_key IS NOT NULL"
		"   AND status <= 'running'"
		"   AND (EXISTS (SELECT 1 FROM distlock.jobs n"
		"     WHERE n.queue_owner = $2 AND n.queue = j.queue"
		"     AND n.dedup_key = j.dedup_key AND n.status <= 'running'"
		"     AND n.queue_owner <> 0::oid)"
		"    OR (j.queue_owner = 0::oid AND EXISTS (SELECT 1"
		"     FROM distlock.jobs o WHERE o.queue_owner = 0::oid"
		"     AND o.queue = j.queue AND o.dedup_key = j.dedup_key"
		"     AND o.status <= 'running' AND o.id < j.id))))"
		"  FOR UPDATE SKIP LOCKED)"
		" RETURNING " DL_JOBS_BACK_RETURNING,
	3, {REGROLEOID, REGROLEOID, REGROLEOID}},
	/* a throttle whose name the receiving role has already is left */
	{"UPDATE distlock.throttles SET owner = $2 WHERE ctid IN"
		" (SELECT ctid FROM distlock.throttles t WHERE owner = $1"
		"  AND NOT EXISTS (SELECT 1 FROM distlock.throttles n"
		"   WHERE n.owner = $2 AND n.name = t.name AND n.owner <> 0::oid)"
		"  AND NOT (t.owner = 0::oid AND EXISTS (SELECT 1"
		"   FROM distlock.throttles o WHERE o.owner = 0::oid"
		"   AND o.name = t.name AND o.ctid < t.ctid))"
		"  FOR UPDATE SKIP LOCKED)",
	3, {REGROLEOID, REGROLEOID, REGROLEOID}},
	/*
	 * The grants the role gave (those it received are not its to give on,
	 * as REASSIGN OWNED leaves privileges) that the receiving role has no
	 * grant to the same grantee like: grants_merge_stmts took those.
	 */
	{"UPDATE distlock.queue_grants SET owner = $2 WHERE ctid IN"
		" (SELECT ctid FROM distlock.queue_grants t WHERE owner = $1"
		"  AND NOT EXISTS (SELECT 1 FROM distlock.queue_grants n"
		"   WHERE n.owner = $2 AND n.queue = t.queue"
		"   AND n.grantee = t.grantee AND " DL_GRANT_OF_ROLES("n") ")"
		"  AND NOT (t.owner = 0::oid AND EXISTS (SELECT 1"
		"   FROM distlock.queue_grants o WHERE o.owner = 0::oid"
		"   AND o.queue = t.queue AND o.grantee = t.grantee"
		"   AND o.ctid < t.ctid))"
		"  FOR UPDATE SKIP LOCKED)",
	3, {REGROLEOID, REGROLEOID, REGROLEOID}},
};

/*
 * reassign_owned(): a grant of the old role to a grantee that the receiving
 * role has granted something too is merged into the receiving role's
 * (privileges OR'ed), then deleted, so that no privilege is lost.
 */
static DistlockStmt grants_merge_stmts[2] = {
	{"UPDATE distlock.queue_grants n SET enqueue = n.enqueue OR o.e,"
		" claim = n.claim OR o.c, manage = n.manage OR o.m"
		" FROM (SELECT queue, grantee, bool_or(enqueue) e, bool_or(claim) c,"
		"  bool_or(manage) m FROM distlock.queue_grants WHERE owner = $1"
		"  GROUP BY queue, grantee) o"
		" WHERE n.owner = $2 AND n.queue = o.queue AND n.grantee = o.grantee"
		" AND " DL_GRANT_OF_ROLES("n"),
	2, {REGROLEOID, REGROLEOID}},
	{"DELETE FROM distlock.queue_grants WHERE ctid IN"
		" (SELECT ctid FROM distlock.queue_grants t WHERE owner = $1"
		"  AND EXISTS (SELECT 1 FROM distlock.queue_grants n"
		"   WHERE n.owner = $2 AND n.queue = t.queue"
		"   AND n.grantee = t.grantee AND " DL_GRANT_OF_ROLES("n") ")"
		"  FOR UPDATE SKIP LOCKED)",
	2, {REGROLEOID, REGROLEOID}},
};

static DistlockStmt sessions_of_stmt = {
	"SELECT id FROM distlock.sessions WHERE created_by = $1",
	1, {REGROLEOID}
};

/* drop_owned(): $1 the role, $2 the caller. */
static DistlockStmt drop_stmts[ADMIN_KINDS - 1] = {
	{"DELETE FROM distlock.locks WHERE name IN"
		" (SELECT name FROM distlock.locks WHERE created_by = $1"
		" FOR UPDATE SKIP LOCKED) RETURNING name",
	2, {REGROLEOID, REGROLEOID}},
	{"DELETE FROM distlock.jobs WHERE id IN"
		" (SELECT id FROM distlock.jobs WHERE (created_by = $1"
		"  OR queue_owner = $1)"
		"  AND (status <> 'running' OR distlock.may_act_for($2, queue_owner))"
		"  FOR UPDATE SKIP LOCKED)",
	2, {REGROLEOID, REGROLEOID}},
	{"DELETE FROM distlock.throttles WHERE ctid IN"
		" (SELECT ctid FROM distlock.throttles WHERE owner = $1"
		" FOR UPDATE SKIP LOCKED)",
	2, {REGROLEOID, REGROLEOID}},
	/*
	 * The grants the role gave, and those it received from owners the
	 * caller may act for: another owner's grant row is that owner's to
	 * lock (its revoke_queue() must not wait for the grantee).
	 */
	{"DELETE FROM distlock.queue_grants WHERE ctid IN"
		" (SELECT ctid FROM distlock.queue_grants WHERE owner = $1"
		"  OR (grantee = $1 AND distlock.may_act_for($2, owner))"
		"  FOR UPDATE SKIP LOCKED)",
	2, {REGROLEOID, REGROLEOID}},
};

/* An administrator's drop_owned() also removes the role's limits. */
static DistlockStmt drop_limits_stmt = {
	"DELETE FROM distlock.limits WHERE role = $1",
	1, {REGROLEOID}
};

/*
 * Raise 42501 unless the caller has the privileges of role (access.c).  A
 * role that no longer exists (rows left behind by a DROP ROLE, named by
 * its OID) is thus for administrators only.
 */
static void
admin_check_role(DistlockCall *call, Oid role)
{
	if (!dl_may_act_for(call, role))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for the distlock rows of role %s",
						DatumGetCString(DirectFunctionCall1(regroleout,
															ObjectIdGetDatum(role)))),
				 errdetail("Only a role with the privileges of that role may change them.")));
}

/* The counts as the record (sessions, locks, jobs, throttles). */
static Datum
admin_result(FunctionCallInfo fcinfo, int64 *counts)
{
	TupleDesc	tupdesc;
	Datum		values[ADMIN_KINDS];
	bool		nulls[ADMIN_KINDS] = {false, false, false, false, false};

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	for (int i = 0; i < ADMIN_KINDS; i++)
		values[i] = Int64GetDatum(counts[i]);
	return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc),
											 values, nulls));
}

/*
 * reassign_owned(old_role regrole, new_role regrole, OUT sessions bigint,
 *				  OUT locks bigint, OUT jobs bigint, OUT throttles bigint,
 *				  OUT queue_grants bigint) RETURNS record
 *
 * Give old_role's sessions, lock grants, jobs, queues (their jobs), throttles
 * and the queue grants it gave to new_role; returns how many of each.
 * Rows another transaction holds, and throttles and dedup keys new_role
 * already has, are left to old_role; a grant to a grantee new_role has
 * granted to as well is merged into new_role's.  Grants old_role received
 * stay (drop_owned() removes them), and so do running jobs of queues the
 * caller may not act for.
 */
Datum
distlock_reassign_owned(PG_FUNCTION_ARGS)
{
	DistlockCall call;
	Datum		values[3];
	int64		counts[ADMIN_KINDS] = {0, 0, 0, 0, 0};

	dl_arg_not_null(fcinfo, 0, "old_role");
	dl_arg_not_null(fcinfo, 1, "new_role");
	values[0] = PG_GETARG_DATUM(0);
	values[1] = PG_GETARG_DATUM(1);

	dl_enter(&call, "distlock.reassign_owned()", true);
	admin_check_role(&call, DatumGetObjectId(values[0]));
	admin_check_role(&call, DatumGetObjectId(values[1]));
	dl_check_role_exists(DatumGetObjectId(values[1]));
	values[2] = ObjectIdGetDatum(call.caller);
	/* to itself: nothing to do, and nothing to lock */
	for (int i = 0; i < ADMIN_KINDS && values[0] != values[1]; i++)
	{
		if (i == ADMIN_KINDS - 1)
		{
			dl_exec(&grants_merge_stmts[0], values, NULL, 0);
			counts[i] = dl_exec(&grants_merge_stmts[1], values, NULL, 0);
		}
		counts[i] += dl_exec(&reassign_stmts[i], values, NULL, 0);
		if (i == 2)
			dl_wake_for_jobs_back();
	}
	/* an administrator may pass limits, which it sets */
	if (values[0] != values[1] && !dl_is_admin(&call))
	{
		for (int i = 0; i < ADMIN_KINDS; i++)
		{
			if (counts[i] > 0 && admin_limits[i] != DL_LIMIT_PAYLOAD)
				dl_limit_after_move(admin_limits[i],
									DatumGetObjectId(values[1]));
		}
	}
	dl_leave(&call);

	PG_RETURN_DATUM(admin_result(fcinfo, counts));
}

/*
 * drop_owned(role regrole, OUT sessions bigint, OUT locks bigint,
 *			  OUT jobs bigint, OUT throttles bigint, OUT queue_grants bigint)
 *		RETURNS record
 *
 * End role's sessions and delete its lock rows, jobs, the jobs of its
 * queues (whoever enqueued them, as DROP OWNED drops a table with its
 * rows), throttles and queue grants (given, and received from owners the
 * caller may act for); an administrator's call also deletes its limits.
 * Returns how many of each.  What another transaction holds is left, and
 * so are running jobs of queues the caller may not act for.
 */
Datum
distlock_drop_owned(PG_FUNCTION_ARGS)
{
	DistlockCall call;
	Datum		values[2];
	int64		counts[ADMIN_KINDS] = {0, 0, 0, 0, 0};
	uint64		n;
	Datum	   *ids;

	dl_arg_not_null(fcinfo, 0, "role");
	values[0] = PG_GETARG_DATUM(0);

	dl_enter(&call, "distlock.drop_owned()", true);
	admin_check_role(&call, DatumGetObjectId(values[0]));
	values[1] = ObjectIdGetDatum(call.caller);

	/* copy the ids out: ending a session runs statements of its own */
	n = dl_exec(&sessions_of_stmt, values, NULL, 0);
	ids = palloc(sizeof(Datum) * (n + 1));
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;

		ids[i] = datumCopy(dl_getattr(i, 1, &isnull), false, UUID_LEN);
	}
	for (uint64 i = 0; i < n; i++)
		counts[0] += dl_session_end_nowait(ids[i]);

	n = dl_exec(&drop_stmts[0], values, NULL, 0);
	counts[1] = n;
	/* waiting acquires of the deleted locks need not poll to find out */
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;

		dl_wake_at_commit(DL_WAIT_LEASE, InvalidOid,
						  dl_getattr(i, 1, &isnull), 1);
	}
	counts[2] = dl_exec(&drop_stmts[1], values, NULL, 0);
	counts[3] = dl_exec(&drop_stmts[2], values, NULL, 0);
	counts[4] = dl_exec(&drop_stmts[3], values, NULL, 0);
	/* a role clearing out its own rows does not clear its limits */
	if (dl_is_admin(&call))
		dl_exec(&drop_limits_stmt, values, NULL, 0);
	dl_leave(&call);

	PG_RETURN_DATUM(admin_result(fcinfo, counts));
}
