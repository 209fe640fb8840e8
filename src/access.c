/*-------------------------------------------------------------------------
 *
 * access.c
 *		Which role may act on a lock, session or job.
 *
 * Every lock grant, session and job records the role that created it
 * (created_by).  A role may act on it (renew, release, fence, heartbeat,
 * close, acknowledge, cancel, or read its payload through claim) only if it
 * has the privileges of that role, as pg_has_role(..., 'USAGE') defines:
 * the role itself, a member that inherits from it, or a superuser.  A role
 * with the privileges of the extension's owner, or of the database's
 * owner, administers distlock and may act on everything: whoever installed
 * it (any role with CREATE on the database may install a trusted
 * extension), and the owner of the database it lives in, whoever that
 * installer was.  The views apply the same rule to what they show.
 *
 * The functions run their statements as the schema owner (exec.c), so the
 * tables themselves grant nothing to callers; these checks are the only way
 * one role reaches another's rows.  A refusal is ERROR 42501 and, being an
 * error, leaves nothing changed.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/access.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/pg_database.h"
#include "catalog/pg_extension.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "distlock.h"

PG_FUNCTION_INFO_V1(distlock_may_act_for);
PG_FUNCTION_INFO_V1(distlock_visible);

/*
 * The owner of the distlock extension (pg_extension.extowner), found by name
 * in one index scan (pg_extension has no syscache).
 */
static Oid
access_extension_owner(void)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	Oid			owner;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber,
				F_NAMEEQ, CStringGetDatum("distlock"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (!HeapTupleIsValid(tup))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("extension \"%s\" does not exist", "distlock")));
	owner = ((Form_pg_extension) GETSTRUCT(tup))->extowner;
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return owner;
}

/* The owner of the current database. */
static Oid
access_database_owner(void)
{
	HeapTuple	tup;
	Oid			owner;

	tup = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(MyDatabaseId));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for database %u", MyDatabaseId);
	owner = ((Form_pg_database) GETSTRUCT(tup))->datdba;
	ReleaseSysCache(tup);
	return owner;
}

/*
 * Whether the caller of this API call may act on what role creator created.
 * The common case, acting on one's own objects, costs a cached role lookup;
 * only a refusal looks up the administrators.
 */
bool
dl_may_act_for(DistlockCall *call, Oid creator)
{
	return has_privs_of_role(call->caller, creator) || dl_is_admin(call);
}

/*
 * Whether the caller administers distlock: it has the privileges of the
 * extension's owner or of the database's owner (or is a superuser).
 */
bool
dl_is_admin(DistlockCall *call)
{
	return has_privs_of_role(call->caller, access_extension_owner()) ||
		has_privs_of_role(call->caller, access_database_owner());
}

/*
 * Raise 42501 unless the caller may act on what creator created: the
 * object of kind named name (a lock, session or throttle name, a job id).
 */
void
dl_check_access(DistlockCall *call, Oid creator, DistlockObject kind,
				const char *name)
{
	if (dl_may_act_for(call, creator))
		return;
	switch (kind)
	{
		case DL_OBJECT_LOCK:
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied for lock \"%s\"", name),
					 errdetail("It belongs to a role whose privileges the current role does not have.")));
			break;
		case DL_OBJECT_SESSION:
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied for session \"%s\"", name),
					 errdetail("It belongs to a role whose privileges the current role does not have.")));
			break;
		case DL_OBJECT_JOB:
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied for job %s", name),
					 errdetail("It belongs to a role whose privileges the current role does not have.")));
			break;
		case DL_OBJECT_THROTTLE:
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied for throttle \"%s\"", name),
					 errdetail("It belongs to a role whose privileges the current role does not have.")));
			break;
	}
}

/*
 * may_act_for(caller regrole, creator regrole) RETURNS boolean
 *
 * Whether role caller may act on what role creator created: the rule above,
 * for the statements the functions run as the schema owner on behalf of
 * caller (the SQL path of claim()).
 */
/* Raise 42704 unless role (an argument naming a role) exists. */
void
dl_check_role_exists(Oid role)
{
	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(role)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("role with OID %u does not exist", role)));
}

/*
 * The role a call's owner argument (argno) names, or, if it is NULL, the
 * calling role: the owner of a throttle or queue.  A role that does not
 * exist raises 42704.
 */
Oid
dl_arg_owner(FunctionCallInfo fcinfo, int argno, DistlockCall *call)
{
	if (PG_ARGISNULL(argno))
		return call->caller;
	dl_check_role_exists(PG_GETARG_OID(argno));
	return PG_GETARG_OID(argno);
}

Datum
distlock_may_act_for(PG_FUNCTION_ARGS)
{
	DistlockCall call;

	call.caller = PG_GETARG_OID(0);
	PG_RETURN_BOOL(dl_may_act_for(&call, PG_GETARG_OID(1)));
}

/*
 * visible(creator regrole) RETURNS boolean
 *
 * Whether the current role may act on what creator created: the rule
 * above, as the views apply it to what they show.
 */
Datum
distlock_visible(PG_FUNCTION_ARGS)
{
	DistlockCall call;

	call.caller = GetUserId();
	PG_RETURN_BOOL(dl_may_act_for(&call, PG_GETARG_OID(0)));
}

/*
 * Raise 42501 unless the caller administers distlock (dl_is_admin()):
 * for function fname ("maintain"), which only administrators may run.
 */
void
dl_require_admin(DistlockCall *call, const char *fname)
{
	if (!dl_is_admin(call))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for function %s", fname),
				 errdetail("Only the extension's owner, the database's owner, or a role with the privileges of either may run it.")));
}
