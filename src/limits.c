/*-------------------------------------------------------------------------
 *
 * limits.c
 *		Per-role limits: sessions, throttles, lock names, and the size of
 *		what is stored.
 *
 * One role must not be able to fill the database for everyone: without
 * limits a role could open 200,000 sessions or throttles in seconds, or
 * enqueue 100 MB payloads.  distlock.limits holds, per role, the most
 * sessions it may have open, the most throttles, lock rows and queue
 * grants it may own,
 * and the largest payload, result, session info or error text (in bytes)
 * it may store; the row without a role (NULL) holds the defaults for every
 * role, and a value not set in either falls back to the built-in default
 * below.  (The defaults are not the row of role 0, '-': that is where a
 * restore puts the limits of a role it does not have.)  Only
 * an administrator (access.c) sets them, with set_limit(): a setting the
 * caller could raise (a user GUC) would limit nothing, and a superuser-only
 * one could not be changed by the owner of a trusted install.
 *
 * Counts are checked where rows are created (session_open(), a throttle's
 * first use, a new grant_queue()), under a transaction-level advisory lock on (role, kind): the
 * creations of one role are thus counted one after another, so the limit
 * is exact, and a role's open transaction can only ever hold up that same
 * role's creations, never another role's.  The count is of committed rows
 * and the transaction's own, read as latest committed once the lock is
 * granted.  What the lock was waited for may have been the creation of
 * the very row the caller was about to create (a throttle's first use, a
 * grant re-made while a revoke of it was in flight): the caller reads it
 * again, or decides whether it is new, under the lock.  Sizes are checked
 * for values over DISTLOCK_MIN_PAYLOAD bytes
 * only, which no limit may be set below, so the common small payload costs
 * no look-up.
 *
 * Lock names are counted at a name's first grant, when its row is
 * created, but without the lock: first grants are frequent (a lock per
 * job) and often made inside a transaction that goes on to do the work,
 * and the lock would make every other first grant of the role wait for
 * that transaction.  Their count is of the rows as they stand, committed
 * or not (a dirty snapshot): another transaction's uncommitted first grant
 * counts from its insert, so a role's open transactions cannot pass the
 * limit one after another; only first grants counted at the same instant
 * can, by at most one row each, which still bounds what it can store.
 * Another transaction's uncommitted row of the same name is not counted:
 * the grant will wait for it, then take that row or find it held.
 * The count walks the role's entries of locks_created_by_idx, up to the
 * limit, so it costs a role in proportion to the lock rows it keeps (free
 * rows go with distlock.lock_retention).
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/limits.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "executor/tuptable.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lock.h"
#include "utils/builtins.h"

#include "distlock.h"

PG_FUNCTION_INFO_V1(distlock_set_limit);

/* Each limit: its name in set_limit(), its column, its built-in default. */
typedef struct LimitInfo
{
	const char *name;
	const char *what;			/* for messages */
	int32		builtin;
} LimitInfo;

static const LimitInfo limit_info[] = {
	[DL_LIMIT_SESSIONS] = {"sessions", "open sessions", 1000},
	[DL_LIMIT_THROTTLES] = {"throttles", "throttles", 10000},
	[DL_LIMIT_PAYLOAD] = {"payload", "bytes per value", 1024 * 1024},
	[DL_LIMIT_LOCKS] = {"locks", "lock names", 100000},
	[DL_LIMIT_GRANTS] = {"grants", "queue grants", 10000},
};

/*
 * The role's value of each limit, else the default row's; NULL in both:
 * not set.  One statement per limit, so that each is a fixed plan.
 */
#define LIMIT_STMT(col) { \
	"SELECT coalesce((SELECT " col " FROM distlock.limits" \
	"  WHERE role = $1 AND role <> 0::oid)," \
	" (SELECT " col " FROM distlock.limits WHERE role IS NULL))", \
	1, {REGROLEOID}}

static DistlockStmt limit_stmts[] = {
	[DL_LIMIT_SESSIONS] = LIMIT_STMT("max_sessions"),
	[DL_LIMIT_THROTTLES] = LIMIT_STMT("max_throttles"),
	[DL_LIMIT_PAYLOAD] = LIMIT_STMT("max_payload"),
	[DL_LIMIT_LOCKS] = LIMIT_STMT("max_locks"),
	[DL_LIMIT_GRANTS] = LIMIT_STMT("max_grants"),
};

/* How many of a role's rows there are, up to $2. */
static DistlockStmt count_stmts[] = {
	[DL_LIMIT_SESSIONS] = {
		"SELECT count(*) FROM (SELECT FROM distlock.sessions"
		" WHERE created_by = $1 LIMIT $2) r",
	2, {REGROLEOID, INT4OID}},
	[DL_LIMIT_THROTTLES] = {
		"SELECT count(*) FROM (SELECT FROM distlock.throttles"
		" WHERE owner = $1 AND owner <> 0::oid LIMIT $2) r",
	2, {REGROLEOID, INT4OID}},
	[DL_LIMIT_GRANTS] = {
		"SELECT count(*) FROM (SELECT FROM distlock.queue_grants g"
		" WHERE owner = $1 AND " DL_GRANT_OF_ROLES("g") " LIMIT $2) r",
	2, {REGROLEOID, INT4OID}},
};

/*
 * set_limit(): per limit, a statement for role $1 and one for the defaults
 * (role NULL), $2 NULL clearing it.
 */
#define SET_STMT(col) { \
	"INSERT INTO distlock.limits (role, " col ") VALUES ($1, $2)" \
	" ON CONFLICT (role) WHERE role <> 0::oid" \
	" DO UPDATE SET " col " = excluded." col, \
	2, {REGROLEOID, INT4OID}}
#define SET_DEFAULT_STMT(col) { \
	"INSERT INTO distlock.limits (role, " col ") VALUES (NULL, $1)" \
	" ON CONFLICT ((role IS NULL)) WHERE role IS NULL" \
	" DO UPDATE SET " col " = excluded." col, \
	1, {INT4OID}}

static DistlockStmt set_stmts[] = {
	[DL_LIMIT_SESSIONS] = SET_STMT("max_sessions"),
	[DL_LIMIT_THROTTLES] = SET_STMT("max_throttles"),
	[DL_LIMIT_PAYLOAD] = SET_STMT("max_payload"),
	[DL_LIMIT_LOCKS] = SET_STMT("max_locks"),
	[DL_LIMIT_GRANTS] = SET_STMT("max_grants"),
};

static DistlockStmt set_default_stmts[] = {
	[DL_LIMIT_SESSIONS] = SET_DEFAULT_STMT("max_sessions"),
	[DL_LIMIT_THROTTLES] = SET_DEFAULT_STMT("max_throttles"),
	[DL_LIMIT_PAYLOAD] = SET_DEFAULT_STMT("max_payload"),
	[DL_LIMIT_LOCKS] = SET_DEFAULT_STMT("max_locks"),
	[DL_LIMIT_GRANTS] = SET_DEFAULT_STMT("max_grants"),
};

/*
 * How many lock rows role has, up to limit, other than those of name (if
 * not 0):
 * committed, and being inserted by transactions in progress too (a dirty
 * snapshot), so that concurrent first grants pass the limit by at most one
 * each.  (A row being updated may count twice: the count errs high, never
 * low.)  A row of name itself, which another transaction of the role is
 * inserting, is not one more: this first grant will wait for it and then
 * take that row, or find it held.  A table too small to hold limit rows
 * is not read.
 */
static int64
limit_count_locks(Oid role, int32 limit, Datum name)
{
	const DistlockCatalog *cat = dl_catalog();
	Relation	rel = table_open(cat->locks, AccessShareLock);
	Relation	idx;
	SnapshotData dirty;
	IndexScanDesc scan;
	TupleTableSlot *slot;
	int64		n = 0;

	dl_catalog_after_lock();

	if ((int64) RelationGetNumberOfBlocks(rel) * MaxHeapTuplesPerPage < limit)
	{
		table_close(rel, AccessShareLock);
		return 0;
	}
	idx = index_open(cat->locks_created_by_idx, AccessShareLock);
	InitDirtySnapshot(dirty);
	scan = dl_index_scan(rel, idx, &dirty, BTEqualStrategyNumber, F_OIDEQ,
						 ObjectIdGetDatum(role));
	slot = table_slot_create(rel, NULL);
	while (n < limit && index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		Datum		row_name = slot_getattr(slot, cat->lock_name, &isnull);

		CHECK_FOR_INTERRUPTS();
		if (name == (Datum) 0 ||
			!DatumGetBool(DirectFunctionCall2Coll(texteq, C_COLLATION_OID,
												  row_name, name)))
			n++;
	}
	ExecDropSingleTupleTableSlot(slot);
	index_endscan(scan);
	index_close(idx, AccessShareLock);
	table_close(rel, AccessShareLock);
	return n;
}

/* The limit which of role now, as last committed. */
static int32
limit_value(DistlockLimit which, Oid role)
{
	Datum		values[1] = {ObjectIdGetDatum(role)};
	bool		isnull;
	Datum		d;

	dl_exec_latest(&limit_stmts[which], values, NULL);
	d = dl_getattr(0, 1, &isnull);
	return isnull ? limit_info[which].builtin : DatumGetInt32(d);
}

/*
 * Take the lock that orders role's creations of rows of kind which (not
 * lock names) until the transaction ends (see the header comment): after
 * it, whether the row is still to be created can be read as last
 * committed, before dl_limit_count() counts.
 */
void
dl_limit_lock(DistlockLimit which, Oid role)
{
	LOCKTAG		tag;

	Assert(which != DL_LIMIT_LOCKS);
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, role, (uint32) which,
						 DISTLOCK_TAG_LIMIT);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
}

/*
 * How many rows of kind which (not lock names) role has, up to upto, as
 * last committed: to be read under dl_limit_lock().
 */
static int64
limit_count_rows(DistlockLimit which, Oid role, int32 upto)
{
	Datum		values[2];

	values[0] = ObjectIdGetDatum(role);
	values[1] = Int32GetDatum(upto);
	dl_exec_latest(&count_stmts[which], values, NULL);
	return dl_getint64(0, 1);
}

/* Raise 53400: role has its limit of kind which. */
void
dl_limit_refuse(DistlockLimit which, Oid role, int32 limit)
{
	ereport(ERROR,
			(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
			 errmsg("role %s has reached its limit of %d %s",
					DatumGetCString(DirectFunctionCall1(regroleout,
														ObjectIdGetDatum(role))),
					limit, limit_info[which].what),
			 which == DL_LIMIT_SESSIONS ?
			 errhint("Close some, or reap those that have expired with distlock.reap(), or have an administrator raise the limit with distlock.set_limit().") :
			 errhint("End some, or have an administrator raise the limit with distlock.set_limit().")));
}

/* Raise 53400 if count is role's limit of kind which, or more. */
static void
limit_check(DistlockLimit which, Oid role, int64 count, int32 limit)
{
	if (count >= limit)
		dl_limit_refuse(which, role, limit);
}

/*
 * Take dl_limit_lock(), then set *count to role's rows of kind which (not
 * lock names), up to its limit, which is returned.
 */
static int32
limit_locked_count(DistlockLimit which, Oid role, int64 *count)
{
	int32		limit;

	dl_limit_lock(which, role);
	limit = limit_value(which, role);
	*count = limit_count_rows(which, role, limit);
	return limit;
}

/*
 * Before role creates one more row of kind which (not lock names), in a
 * call between dl_enter() and dl_leave(): raise 53400 if it has its limit
 * already.  Takes dl_limit_lock().
 */
void
dl_limit_count(DistlockLimit which, Oid role)
{
	int64		count;
	int32		limit = limit_locked_count(which, role, &count);

	limit_check(which, role, count, limit);
}

/*
 * Whether role has its limit of rows of kind which (not lock names), or
 * more: dl_limit_count() would refuse.  Sets *limit to the limit.  Takes
 * dl_limit_lock().
 */
bool
dl_limit_full(DistlockLimit which, Oid role, int32 *limit)
{
	int64		count;

	*limit = limit_locked_count(which, role, &count);
	return count >= *limit;
}

/*
 * Before role's first grant of lock name creates its row: raise 53400 if
 * role has its limit of lock names already (see the header comment).
 */
void
dl_limit_count_locks(Oid role, Datum name)
{
	int32		limit = limit_value(DL_LIMIT_LOCKS, role);

	limit_check(DL_LIMIT_LOCKS, role, limit_count_locks(role, limit, name),
				limit);
}

/*
 * Raise 54000 if value (a jsonb or text argument called what) is larger
 * than role's payload limit.
 */
void
dl_limit_size(Datum value, const char *what, Oid role)
{
	Size		size = toast_raw_datum_size(value);
	int32		limit;

	if (size <= DISTLOCK_MIN_PAYLOAD)
		return;
	limit = limit_value(DL_LIMIT_PAYLOAD, role);
	if (size > (Size) limit)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("%s is too large", what),
				 errdetail("It has %zu bytes; the limit is %d.", size, limit)));
}

/*
 * set_limit(limit_name text, value integer, role regrole DEFAULT NULL)
 *		RETURNS void
 *
 * Set limit limit_name ('sessions', 'throttles', 'locks', 'grants' or
 * 'payload', in bytes) of
 * role, or with role NULL the default of every role; value NULL clears it
 * (back to the default, or to the built-in one).  Administrators only.
 */
Datum
distlock_set_limit(PG_FUNCTION_ARGS)
{
	char	   *name;
	DistlockCall call;
	Datum		values[2];
	char		nulls[2] = "  ";
	int			which = -1;

	dl_arg_not_null(fcinfo, 0, "limit_name");
	name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	for (int i = 0; i < lengthof(limit_info); i++)
		if (strcmp(name, limit_info[i].name) == 0)
			which = i;
	if (which < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown limit \"%s\"", name),
				 errhint("The limits are \"sessions\", \"throttles\", \"locks\", \"grants\" and \"payload\".")));
	if (!PG_ARGISNULL(1) &&
		PG_GETARG_INT32(1) < (which == DL_LIMIT_PAYLOAD ? DISTLOCK_MIN_PAYLOAD : 0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("limit \"%s\" must be at least %d", name,
						which == DL_LIMIT_PAYLOAD ? DISTLOCK_MIN_PAYLOAD : 0)));
	if (!PG_ARGISNULL(2))
		dl_check_role_exists(PG_GETARG_OID(2));
	values[0] = PG_ARGISNULL(2) ? (Datum) 0 : PG_GETARG_DATUM(2);
	values[1] = PG_ARGISNULL(1) ? (Datum) 0 : PG_GETARG_DATUM(1);
	nulls[1] = PG_ARGISNULL(1) ? 'n' : ' ';

	dl_enter(&call, "distlock.set_limit()", true);
	dl_require_admin(&call, "set_limit");
	if (PG_ARGISNULL(2))
		dl_exec(&set_default_stmts[which], &values[1], &nulls[1], 0);
	else
		dl_exec(&set_stmts[which], values, nulls, 0);
	dl_leave(&call);

	PG_RETURN_VOID();
}

/*
 * After rows of kind which (not sizes) were given to role
 * (reassign_owned() by a role that is no administrator): raise 53400 if it
 * now has more than its limit, so that a role cannot pass its limits by
 * moving its rows to a role whose privileges it has and creating more.
 */
void
dl_limit_after_move(DistlockLimit which, Oid role)
{
	int32		limit = limit_value(which, role);
	int64		count;

	if (limit == PG_INT32_MAX)
		return;
	if (which == DL_LIMIT_LOCKS)
		count = limit_count_locks(role, limit + 1, (Datum) 0);
	else
	{
		dl_limit_lock(which, role);
		count = limit_count_rows(which, role, limit + 1);
	}
	/* more than the limit: it has reached it, and one over */
	limit_check(which, role, count - 1, limit);
}
