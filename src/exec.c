/*-------------------------------------------------------------------------
 *
 * exec.c
 *		Run distlock's own SQL as the extension owner, with prepared plans.
 *
 * Every API function brackets its table access with dl_enter() and
 * dl_leave().  In between:
 *
 *	- the current user is the owner of schema distlock, so callers need no
 *	  privileges on the tables (they get none by default) and act on them
 *	  only through the functions, which check what the caller may do;
 *	- search_path is "pg_catalog, pg_temp", set at a new GUC nest level as
 *	  fmgr does for a function with SET search_path (and as core's own
 *	  CREATE SCHEMA and amcheck do since CVE-2023-2454), so the statements
 *	  below, which qualify distlock's objects and leave built-in functions
 *	  and operators unqualified, resolve to the catalog whatever the
 *	  caller's search_path holds (temporary objects are searched last, and
 *	  never for functions and operators), and cached plans are not
 *	  invalidated by a caller's search_path.  A setting rather than the
 *	  override search path core withdrew: a trigger or function of the
 *	  owner's with its own SET search_path keeps it;
 *	- enable_seqscan is off, at the same level, so that every statement
 *	  finds its rows by index whatever the statistics say: a plan made
 *	  while a table was nearly empty (after the install, a TRUNCATE, a
 *	  DELETE and VACUUM) is kept until the table is next analysed, and a
 *	  sequential scan chosen then would read the whole table on every call
 *	  as it fills.  Where no index serves (maintain()'s scan for free lock
 *	  rows) the scan is still planned; the views, which read every row the
 *	  caller may see, turn it back on (views.c);
 *	- jit is off, at the same level: a plan that must scan where seqscans
 *	  are off costs more than any jit_above_cost (disable_cost), and JIT
 *	  then compiles it, some 50 ms, on every execution (a backend's first
 *	  grant reads token_seq so; maintain() scans for free lock rows so),
 *	  and none of these statements computes enough per row to repay it;
 *	- SPI is connected.
 *
 * This is what fmgr does for a SECURITY DEFINER function with SET
 * search_path, done here so the C code can still see who called it.
 * Should the call fail, transaction or subtransaction abort restores the
 * user id and the setting and cleans up SPI, as it does for SECURITY
 * DEFINER.
 *
 * wait.c runs its calls of distlock's own functions through dl_exec() too,
 * but as the caller, outside dl_enter(): those functions enter themselves.
 *
 * Plans are prepared on first use and kept for the life of the backend
 * (SPI_keepplan); the plan cache re-plans them if the tables change.  They
 * are always generic plans (CURSOR_OPT_GENERIC_PLAN, whatever
 * plan_cache_mode says): every statement is a key lookup or a walk of one
 * index whose plan does not depend on the parameters, and the plan cache
 * would otherwise keep re-planning a statement whose generic cost it
 * overestimates (claim's LIMIT $n), which cost claim() a third of its time.
 * Each statement is written so that its generic plan is the right one.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/exec.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "distlock.h"

/*
 * Start an API call named fname ("distlock.claim()").  A call that writes is
 * refused with 25006 in a read-only transaction and on a standby, before it
 * touches anything.
 */
void
dl_enter(DistlockCall *call, const char *fname, bool writes)
{
	if (writes)
		PreventCommandIfReadOnly(fname);

	call->caller = GetUserId();
	GetUserIdAndSecContext(&call->save_userid, &call->save_sec_context);
	SetUserIdAndSecContext(dl_catalog()->schema_owner,
						   call->save_sec_context |
						   SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);

	call->save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
							 true, 0, false);
	(void) set_config_option("enable_seqscan", "off",
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
							 true, 0, false);
	(void) set_config_option("jit", "off",
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
							 true, 0, false);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
}

/*
 * End an API call started with dl_enter().  Anything SPI returned is freed:
 * callers copy out what they need first.
 */
void
dl_leave(DistlockCall *call)
{
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
	AtEOXact_GUC(true, call->save_nestlevel);
	SetUserIdAndSecContext(call->save_userid, call->save_sec_context);
}

/*
 * Execute stmt with the given parameters (nulls as for SPI: ' ' or 'n', or
 * NULL for none), returning at most count rows (0: all).  Returns the number
 * of rows processed; the rows are in SPI_tuptable.
 */
static SPIPlanPtr
exec_plan(DistlockStmt *stmt)
{
	if (stmt->plan == NULL)
	{
		/* always the generic plan: see the header comment */
		SPIPlanPtr	plan = SPI_prepare_cursor(stmt->sql, stmt->nargs,
											  stmt->argtypes,
											  CURSOR_OPT_GENERIC_PLAN);

		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed for \"%s\": %s",
				 stmt->sql, SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "SPI_keepplan failed");
		stmt->plan = plan;
	}
	return stmt->plan;
}

static uint64
exec_done(DistlockStmt *stmt, int rc)
{
	if (rc < 0)
		elog(ERROR, "SPI_execute_plan failed for \"%s\": %s",
			 stmt->sql, SPI_result_code_string(rc));
	return SPI_processed;
}

uint64
dl_exec(DistlockStmt *stmt, Datum *values, const char *nulls, long count)
{
	return exec_done(stmt, SPI_execute_plan(exec_plan(stmt), values, nulls,
											false, count));
}

/*
 * dl_exec() of a read-only statement on the caller's snapshot, as a view
 * in the caller's query would read: not what later commands of the same
 * statement, nor other transactions since, have done.
 */
uint64
dl_exec_read(DistlockStmt *stmt, Datum *values, const char *nulls)
{
	return exec_done(stmt, SPI_execute_plan(exec_plan(stmt), values, nulls,
											true, 0));
}

/*
 * dl_exec() on the latest committed state (and this transaction's own
 * changes) whatever the isolation level: for a decision taken under a lock
 * that a transaction snapshot older than the lock would get wrong.
 */
static uint64
exec_latest(DistlockStmt *stmt, Datum *values, const char *nulls,
			bool read_only)
{
	return exec_done(stmt, SPI_execute_snapshot(exec_plan(stmt), values, nulls,
												GetLatestSnapshot(),
												InvalidSnapshot, read_only,
												true, 0));
}

uint64
dl_exec_latest(DistlockStmt *stmt, Datum *values, const char *nulls)
{
	return exec_latest(stmt, values, nulls, false);
}

/*
 * dl_exec_latest() of a read-only statement, without advancing the command
 * counter: for a STABLE function (has_queue_privilege()), which must not
 * make its statement's later rows see what it did.  Not in a parallel
 * query (its leader may not take a new snapshot): such functions are
 * PARALLEL UNSAFE.
 */
uint64
dl_exec_latest_read(DistlockStmt *stmt, Datum *values, const char *nulls)
{
	return exec_latest(stmt, values, nulls, true);
}

/* Column col (1-based) of result row row (0-based) of the last dl_exec(). */
Datum
dl_getattr(int row, int col, bool *isnull)
{
	return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc,
						 col, isnull);
}

/* A bigint column that cannot be NULL. */
int64
dl_getint64(int row, int col)
{
	bool		isnull;
	Datum		d = dl_getattr(row, col, &isnull);

	if (isnull)
		elog(ERROR, "unexpected null in column %d", col);
	return DatumGetInt64(d);
}

/*
 * Run fn(arg) in a subtransaction of its own, kept (released into the
 * caller's) if fn returns true and rolled back if it returns false, which
 * lets go of the row locks it took; returns what fn returned.  An error
 * inside rolls the subtransaction back before it goes on: left open, a
 * caller's own handler (a PL/pgSQL EXCEPTION clause) would roll back ours
 * instead of its own, still as the schema's owner.  caught(arg, edata), if
 * given, is then asked whether it takes the error (the call returns false)
 * rather than let it go on.
 */
bool
dl_subxact(bool (*fn) (void *), bool (*caught) (void *, ErrorData *),
		   void *arg)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile bool keep = false;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		keep = fn(arg);
		if (keep)
			ReleaseCurrentSubTransaction();
		else
			RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		if (caught == NULL || !caught(arg, edata))
			ReThrowError(edata);
		FreeErrorData(edata);
		keep = false;
	}
	PG_END_TRY();
	return keep;
}

/* What dl_wait_bounded() runs, and the timeouts it sets and restores. */
typedef struct WaitBounded
{
	void		(*fn) (void *);
	void		(*undo) (void *);
	void	   *arg;
	TimestampTz until;
	bool		timer;			/* LOCK_TIMEOUT armed at until by us */
	bool		statement_timer;	/* STATEMENT_TIMEOUT armed on entry */
	int			save_timeout;
} WaitBounded;

static bool
wait_bounded_run(void *arg)
{
	WaitBounded *wb = (WaitBounded *) arg;

	/*
	 * The lock timeout's timer, at until for all the waits fn makes
	 * together: with lock_timeout 0, ProcSleep() neither sets nor clears
	 * it.  An until already past waits at most a millisecond for each lock,
	 * as lock_timeout would, so that a last look can still succeed.
	 */
	wb->timer = wb->until > GetCurrentTimestamp();
	LockTimeout = wb->timer ? 0 : 1;
	if (wb->timer)
		enable_timeout_at(LOCK_TIMEOUT, wb->until);
	wb->fn(wb->arg);
	if (wb->timer)
		disable_timeout(LOCK_TIMEOUT, true);
	LockTimeout = wb->save_timeout;

	/*
	 * A timeout that fired as fn finished is ours to take here, not the
	 * caller's: its indicator was kept, so it is reported as one.
	 */
	CHECK_FOR_INTERRUPTS();
	return true;
}

static bool
wait_bounded_caught(void *arg, ErrorData *edata)
{
	WaitBounded *wb = (WaitBounded *) arg;

	if (wb->timer)
	{
		disable_timeout(LOCK_TIMEOUT, true);
		/* fired while another error rolled back: a cancel of ours, gone */
		if (get_timeout_indicator(LOCK_TIMEOUT, true))
			QueryCancelPending = false;
	}
	LockTimeout = wb->save_timeout;
	if (wb->undo)
		wb->undo(wb->arg);
	if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
		return false;

	/*
	 * The caller's statement timeout, fired with ours, is reported as ours
	 * (ProcessInterrupts()) and would be lost with it.
	 */
	if (wb->statement_timer && !get_timeout_active(STATEMENT_TIMEOUT) &&
		get_timeout_finish_time(STATEMENT_TIMEOUT) <= GetCurrentTimestamp())
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("canceling statement due to statement timeout")));
	return true;
}

/*
 * Run fn(arg) in a subtransaction (dl_subxact()) whose lock waits, all of
 * them together, end at until: the lock manager's lock timeout, set to
 * that instant in place of the caller's lock_timeout.  Returns true if fn
 * ran to its end, what it locked kept; false if until came first, the
 * subtransaction rolled back, after undo(arg) if given.  Any other error
 * goes on to the caller, the same way.  Nothing fn writes may need its
 * row's xmin to be the transaction's own id, and fn may not call this
 * again (the timer is one).  until 0: fn(arg) as it is, under the caller's
 * lock_timeout, and true.
 */
bool
dl_wait_bounded(void (*fn) (void *), void (*undo) (void *), void *arg,
				TimestampTz until)
{
	WaitBounded wb = {fn, undo, arg, until, false,
	get_timeout_active(STATEMENT_TIMEOUT), LockTimeout};

	if (until == 0)
	{
		fn(arg);
		return true;
	}
	return dl_subxact(wait_bounded_run, wait_bounded_caught, &wb);
}
