/*-------------------------------------------------------------------------
 *
 * grants.c
 *		Queues belong to a role: who may enqueue, claim and manage in one.
 *
 * A queue is the pair (owner, name).  A role's enqueue('emails') and
 * claim('emails') name its own queue; another role's queue is named with
 * the calls' owner argument.  A role may act in a queue if it has the
 * privileges of the queue's owner (which the extension's and database's
 * owners have for every role, access.c), or of a role the owner granted
 * the privilege to with grant_queue():
 *
 *	enqueue		add jobs (whose dedup keys then share the queue's namespace)
 *	claim		claim any job of the queue, whoever enqueued it
 *	manage		see every job of the queue, cancel any of them, cancel_jobs()
 *
 * This is what keeps one role from denying service to another through the
 * queue: since only roles the owner trusts can put jobs in a queue, no
 * other role's jobs are ever in its claims' path (a claim takes any due
 * job of the queue, so it never walks past jobs it may not take, and its
 * cost does not depend on any other queue), no other role can hold one of
 * its dedup keys, and no role can take another's queue name first, as
 * names are per owner.  The check is made once per call, before a job row
 * is read.
 *
 * A job itself still belongs to the role that enqueued it: that role (and
 * any role with its privileges) sees it and may cancel it, wherever it is.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/grants.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"

#include "distlock.h"

PG_FUNCTION_INFO_V1(distlock_grant_queue);
PG_FUNCTION_INFO_V1(distlock_revoke_queue);
PG_FUNCTION_INFO_V1(distlock_has_queue_privilege);
PG_FUNCTION_INFO_V1(distlock_cancel_jobs);

/* The grants of one queue. */
static DistlockStmt grants_stmt = {
	"SELECT grantee, enqueue, claim, manage FROM distlock.queue_grants g"
	" WHERE owner = $1 AND queue = $2 AND " DL_GRANT_OF_ROLES("g"),
	2, {REGROLEOID, TEXTOID}
};

/*
 * Add (grant_stmt) or take away (revoke_stmt, then revoke_empty_stmt,
 * which deletes a grant left with none) the privileges $4, $5, $6
 * (enqueue, claim, manage) of grantee $3 on queue $2 of owner $1.
 */
static DistlockStmt grant_stmt = {
	"INSERT INTO distlock.queue_grants AS g"
	" (owner, queue, grantee, enqueue, claim, manage)"
	" VALUES ($1, $2, $3, $4, $5, $6)"
	" ON CONFLICT (owner, queue, grantee) WHERE " DL_GRANT_OF_ROLES("g")
	" DO UPDATE SET"
	" enqueue = g.enqueue OR excluded.enqueue,"
	" claim = g.claim OR excluded.claim,"
	" manage = g.manage OR excluded.manage",
	6, {REGROLEOID, TEXTOID, REGROLEOID, BOOLOID, BOOLOID, BOOLOID}
};

/* Whether grantee $3 has a grant on queue $2 of owner $1. */
static DistlockStmt grant_exists_stmt = {
	"SELECT FROM distlock.queue_grants g"
	" WHERE owner = $1 AND queue = $2 AND grantee = $3"
	" AND " DL_GRANT_OF_ROLES("g"),
	3, {REGROLEOID, TEXTOID, REGROLEOID}
};

static DistlockStmt revoke_stmt = {
	"UPDATE distlock.queue_grants g SET"
	" enqueue = enqueue AND NOT $4, claim = claim AND NOT $5,"
	" manage = manage AND NOT $6"
	" WHERE owner = $1 AND queue = $2 AND grantee = $3"
	" AND " DL_GRANT_OF_ROLES("g"),
	6, {REGROLEOID, TEXTOID, REGROLEOID, BOOLOID, BOOLOID, BOOLOID}
};

/* After a revoke (a statement of its own: it sees the UPDATE's versions). */
static DistlockStmt revoke_empty_stmt = {
	"DELETE FROM distlock.queue_grants g"
	" WHERE owner = $1 AND queue = $2 AND grantee = $3"
	" AND " DL_GRANT_OF_ROLES("g") " AND NOT (enqueue OR claim OR manage)",
	3, {REGROLEOID, TEXTOID, REGROLEOID}
};

/*
 * cancel_jobs(): the unfinished jobs of a queue that no other transaction
 * holds.
 */
static DistlockStmt cancel_jobs_stmt = {
	"UPDATE distlock.jobs SET status = 'cancelled', finished_at = $3"
	" WHERE id IN (SELECT id FROM distlock.jobs"
	"  WHERE queue_owner = $1 AND queue = $2 AND status <= 'running'"
	"  FOR UPDATE SKIP LOCKED)",
	3, {REGROLEOID, TEXTOID, TIMESTAMPTZOID}
};

/*
 * Parse privileges, a comma-separated list of enqueue, claim and manage
 * (any case, spaces around), or all, into a mask; 22023 otherwise.
 */
static int
grants_parse(text *privileges)
{
	char	   *list = text_to_cstring(privileges);
	char	   *save = NULL;
	int			mask = 0;

	for (char *tok = strtok_r(list, ",", &save); tok != NULL;
		 tok = strtok_r(NULL, ",", &save))
	{
		char	   *end;

		while (*tok == ' ')
			tok++;
		end = tok + strlen(tok);
		while (end > tok && end[-1] == ' ')
			*--end = '\0';
		if (pg_strcasecmp(tok, "enqueue") == 0)
			mask |= DL_QUEUE_ENQUEUE;
		else if (pg_strcasecmp(tok, "claim") == 0)
			mask |= DL_QUEUE_CLAIM;
		else if (pg_strcasecmp(tok, "manage") == 0)
			mask |= DL_QUEUE_MANAGE;
		else if (pg_strcasecmp(tok, "all") == 0)
			mask |= DL_QUEUE_ENQUEUE | DL_QUEUE_CLAIM | DL_QUEUE_MANAGE;
		else
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("unrecognized queue privilege: \"%s\"", tok),
					 errhint("The privileges are enqueue, claim and manage, or all.")));
	}
	if (mask == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("privileges must name at least one privilege")));
	return mask;
}

/*
 * What the caller may do in owner's queue, a mask of DL_QUEUE_*: all of it
 * with the owner's privileges, else what the owner granted to roles whose
 * privileges it has.  Overwrites SPI_tuptable.
 */
int
dl_queue_privileges(DistlockCall *call, Oid owner, Datum queue)
{
	Datum		values[2] = {ObjectIdGetDatum(owner), queue};
	int			privs = 0;
	uint64		n;

	if (dl_may_act_for(call, owner))
		return DL_QUEUE_ENQUEUE | DL_QUEUE_CLAIM | DL_QUEUE_MANAGE;
	/* as committed now, whatever the isolation level: a revoke counts */
	n = dl_exec_latest_read(&grants_stmt, values, NULL);
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;

		if (!has_privs_of_role(call->caller,
							   DatumGetObjectId(dl_getattr(i, 1, &isnull))))
			continue;
		if (DatumGetBool(dl_getattr(i, 2, &isnull)))
			privs |= DL_QUEUE_ENQUEUE;
		if (DatumGetBool(dl_getattr(i, 3, &isnull)))
			privs |= DL_QUEUE_CLAIM;
		if (DatumGetBool(dl_getattr(i, 4, &isnull)))
			privs |= DL_QUEUE_MANAGE;
	}
	return privs;
}

/* Raise 42501 unless the caller may do priv in owner's queue. */
void
dl_queue_check(DistlockCall *call, Oid owner, Datum queue, int priv)
{
	if (!dl_queue_allowed(call, owner, queue, priv))
		dl_queue_denied(owner, queue, priv);
}

/* Raise 42501: the caller may not do priv in owner's queue. */
void
dl_queue_denied(Oid owner, Datum queue, int priv)
{
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to %s in queue \"%s\" of role %s",
					priv == DL_QUEUE_ENQUEUE ? "enqueue" :
					priv == DL_QUEUE_CLAIM ? "claim" : "manage jobs",
					TextDatumGetCString(queue),
					DatumGetCString(DirectFunctionCall1(regroleout,
														ObjectIdGetDatum(owner)))),
			 errdetail("The queue belongs to a role whose privileges the current role does not have, and its owner has not granted it that privilege.")));
}

/*
 * Whether the caller may see a job of creator in owner's queue: it may act
 * for its creator, or claim from or manage the queue.
 */
bool
dl_job_visible(DistlockCall *call, Oid creator, Oid owner, Datum queue)
{
	return dl_may_act_for(call, creator) ||
		dl_queue_allowed(call, owner, queue, DL_QUEUE_CLAIM | DL_QUEUE_MANAGE);
}

/*
 * Grant (grant) or revoke the privileges of argument 1 on queue of argument
 * 0 to the role of argument 2; the queue is that of argument 3 (NULL: the
 * caller's), whose privileges the caller must have.
 */
static void
grants_change(FunctionCallInfo fcinfo, bool grant, const char *fname)
{
	text	   *queue = dl_arg_name(fcinfo, 0, "queue name");
	DistlockCall call;
	Datum		values[6];
	int			mask;
	Oid			owner;

	dl_arg_not_null(fcinfo, 1, "privileges");
	dl_arg_not_null(fcinfo, 2, "grantee");
	mask = grants_parse(PG_GETARG_TEXT_PP(1));
	dl_check_role_exists(PG_GETARG_OID(2));

	dl_enter(&call, fname, true);
	owner = dl_arg_owner(fcinfo, 3, &call);
	if (!dl_may_act_for(&call, owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to grant or revoke privileges on queue \"%s\" of role %s",
						text_to_cstring(queue),
						DatumGetCString(DirectFunctionCall1(regroleout,
															ObjectIdGetDatum(owner)))),
				 errdetail("Only a role with the privileges of the queue's owner may.")));
	values[0] = ObjectIdGetDatum(owner);
	values[1] = PointerGetDatum(queue);
	values[2] = PG_GETARG_DATUM(2);
	values[3] = BoolGetDatum((mask & DL_QUEUE_ENQUEUE) != 0);
	values[4] = BoolGetDatum((mask & DL_QUEUE_CLAIM) != 0);
	values[5] = BoolGetDatum((mask & DL_QUEUE_MANAGE) != 0);
	/*
	 * A new grant is a row more of the owner's (limits.c).  Whether it is
	 * new is read under the limit's lock, so that a grant found to exist,
	 * which a revoke in flight may yet delete and this grant then insert
	 * again, is ordered against the role's other new grants all the same.
	 * A revoke takes the lock too, before the rows: a transaction that
	 * revokes and then grants would otherwise hold a grant's row while
	 * waiting for the lock, against a re-grant of that row holding the
	 * lock while waiting for the row.
	 */
	dl_limit_lock(DL_LIMIT_GRANTS, owner);
	if (grant && dl_exec_latest(&grant_exists_stmt, values, NULL) == 0)
		dl_limit_count(DL_LIMIT_GRANTS, owner);
	dl_exec(grant ? &grant_stmt : &revoke_stmt, values, NULL, 0);
	if (!grant)
		dl_exec(&revoke_empty_stmt, values, NULL, 0);
	dl_leave(&call);
}

/*
 * grant_queue(queue text, privileges text, grantee regrole,
 *			   owner regrole DEFAULT NULL) RETURNS void
 *
 * Let grantee (and every role with its privileges) enqueue, claim or
 * manage in owner's (NULL: the current role's) queue.  The queue need not
 * have jobs yet: a grant is what lets another role put the first one in.
 */
Datum
distlock_grant_queue(PG_FUNCTION_ARGS)
{
	grants_change(fcinfo, true, "distlock.grant_queue()");
	PG_RETURN_VOID();
}

/*
 * revoke_queue(queue text, privileges text, grantee regrole,
 *				owner regrole DEFAULT NULL) RETURNS void
 *
 * Take back what grant_queue() gave.  Jobs already enqueued or claimed
 * stay as they are.
 */
Datum
distlock_revoke_queue(PG_FUNCTION_ARGS)
{
	grants_change(fcinfo, false, "distlock.revoke_queue()");
	PG_RETURN_VOID();
}

/*
 * has_queue_privilege(role regrole, queue text, privilege text,
 *					   owner regrole DEFAULT NULL) RETURNS boolean
 *
 * Whether role may do any of privilege (a comma-separated list) in
 * owner's (NULL: the current role's) queue, by the rule of the calls.
 */
Datum
distlock_has_queue_privilege(PG_FUNCTION_ARGS)
{
	DistlockCall call;
	int			mask;
	Oid			owner;
	bool		allowed;
	text	   *queue;

	dl_arg_not_null(fcinfo, 0, "role");
	queue = dl_arg_name(fcinfo, 1, "queue name");
	dl_arg_not_null(fcinfo, 2, "privilege");
	mask = grants_parse(PG_GETARG_TEXT_PP(2));
	dl_check_role_exists(PG_GETARG_OID(0));

	dl_enter(&call, "distlock.has_queue_privilege()", false);
	owner = dl_arg_owner(fcinfo, 3, &call);
	call.caller = PG_GETARG_OID(0);
	allowed = dl_queue_allowed(&call, owner, PointerGetDatum(queue), mask);
	dl_leave(&call);

	PG_RETURN_BOOL(allowed);
}

/*
 * cancel_jobs(queue text, owner regrole DEFAULT NULL) RETURNS bigint
 *
 * Cancel every pending and running job of owner's (NULL: the current
 * role's) queue, for a role that may manage it, and return how many.
 * Never waits: a job another transaction holds (being claimed or
 * acknowledged) is left, so the caller may run it again.
 */
Datum
distlock_cancel_jobs(PG_FUNCTION_ARGS)
{
	text	   *queue = dl_arg_name(fcinfo, 0, "queue name");
	DistlockCall call;
	Datum		values[3];
	uint64		n;

	dl_enter(&call, "distlock.cancel_jobs()", true);
	values[0] = ObjectIdGetDatum(dl_arg_owner(fcinfo, 1, &call));
	values[1] = PointerGetDatum(queue);
	dl_queue_check(&call, DatumGetObjectId(values[0]), values[1],
				   DL_QUEUE_MANAGE);
	values[2] = TimestampTzGetDatum(GetCurrentTimestamp());
	n = dl_exec(&cancel_jobs_stmt, values, NULL, 0);
	dl_leave(&call);

	PG_RETURN_INT64((int64) n);
}
