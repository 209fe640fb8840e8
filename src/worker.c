/*-------------------------------------------------------------------------
 *
 * worker.c
 *		The background workers that keep distlock tidy when it is preloaded.
 *
 * A launcher ("distlock launcher"), connected to no database, lists the
 * databases that allow connections and are not templates (only those in
 * distlock.maintenance_databases, if it is set) and starts one worker
 * ("distlock maintenance") in each.  A worker finds out whether distlock
 * is installed in its database; if not, it exits, and the launcher tries
 * that database again after DISTLOCK_ABSENT_RECHECK.  Otherwise it calls
 * distlock.maintain() every distlock.maintenance_naptime, and again at
 * once while a pass comes back with more to do, so expired sessions are
 * reaped within about a naptime of expiring.
 *
 * A worker stays connected to its database, which would make DROP
 * DATABASE, ALTER DATABASE ... RENAME or SET TABLESPACE, and CREATE
 * DATABASE with it as template fail ("being accessed by other users").
 * So, as autovacuum's workers are, it is moved out of the way: a utility
 * hook asks the launcher to leave that database alone for
 * DISTLOCK_PAUSE_SECS and ends its worker before the command runs.
 *
 * The launcher is restarted by the postmaster if it exits or the server
 * restarts after a crash; it starts the workers again.  A worker that
 * fails (its error is logged) is started again after
 * DISTLOCK_FAILED_RESTART.  The server applies the settings of ALTER
 * DATABASE and ALTER ROLE ... SET only when a connection starts, so a
 * worker whose settings there change (ALTER DATABASE app SET
 * distlock.job_retention = '7d', the README's way to keep a database's
 * results longer) exits, and is started again at once.  Neither
 * runs on a standby: they start once recovery has finished, so after a
 * promotion too.
 *
 * Shared state: one slot per database the launcher serves (its worker's
 * PID, and how long it is paused), under a spinlock held for a few
 * instructions.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/worker.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "compat.h"
#include "distlock.h"

PGDLLEXPORT void distlock_launcher_main(Datum arg);
PGDLLEXPORT void distlock_maintenance_main(Datum arg);

/*
 * A database without distlock is looked at again after this long, one
 * whose worker failed after this.
 */
#define DISTLOCK_ABSENT_RECHECK		(60 * USECS_PER_SEC)
#define DISTLOCK_FAILED_RESTART		(10 * USECS_PER_SEC)

/* How long a database is left alone for a command that needs it empty. */
#define DISTLOCK_PAUSE_SECS			10

/* How often the launcher looks for new databases. */
#define DISTLOCK_LAUNCHER_NAPTIME_MS	10000

/* distlock.maintenance_naptime, distlock.maintenance_databases */
int			dl_maintenance_naptime = 1000;
char	   *dl_maintenance_databases = NULL;

typedef struct WorkerDb
{
	Oid			dbid;			/* InvalidOid: slot free */
	pid_t		pid;			/* its worker, or 0 */
	bool		absent;			/* its worker found no distlock there */
	bool		recheck;		/* distlock was just installed or updated */
	bool		restart;		/* its worker left to apply new settings */
	TimestampTz paused_until;
} WorkerDb;

typedef struct WorkerShared
{
	slock_t		mutex;
	int			launcher_procno;	/* -1 until the launcher runs */
	int			ndbs;
	WorkerDb	dbs[FLEXIBLE_ARRAY_MEMBER];
} WorkerShared;

static WorkerShared *worker_shared = NULL;
static ProcessUtility_hook_type prev_process_utility_hook = NULL;

/* The launcher's own view of each database it has seen (local memory). */
typedef struct LauncherDb
{
	Oid			dbid;
	BackgroundWorkerHandle *handle;
	TimestampTz retry_at;		/* not before this is it started again */
	bool		seen;			/* still listed in pg_database */
} LauncherDb;

static Size
worker_shared_size(void)
{
	return add_size(offsetof(WorkerShared, dbs),
					mul_size(max_worker_processes, sizeof(WorkerDb)));
}

/* A new region of shared memory: no launcher yet, no database. */
static void
worker_shared_init(void *ptr)
{
	WorkerShared *ws = (WorkerShared *) ptr;

	memset(ws, 0, worker_shared_size());
	SpinLockInit(&ws->mutex);
	ws->launcher_procno = -1;
	ws->ndbs = max_worker_processes;
}

/* The shared slot of dbid, taking a free one if add; NULL if none. */
static WorkerDb *
worker_slot(Oid dbid, bool add)
{
	WorkerDb   *free_slot = NULL;

	for (int i = 0; i < worker_shared->ndbs; i++)
	{
		if (worker_shared->dbs[i].dbid == dbid)
			return &worker_shared->dbs[i];
		if (free_slot == NULL && worker_shared->dbs[i].dbid == InvalidOid)
			free_slot = &worker_shared->dbs[i];
	}
	if (add && free_slot != NULL)
	{
		free_slot->dbid = dbid;
		free_slot->pid = 0;
		free_slot->absent = false;
		free_slot->recheck = false;
		free_slot->restart = false;
		free_slot->paused_until = 0;
		return free_slot;
	}
	return NULL;
}

/*
 * Before a command that needs a database without other connections: keep
 * the launcher from starting a worker there for a while, and end the one
 * there is.  (The command waits a few seconds for connections to go.)
 */
static void
worker_leave_database(const char *dbname)
{
	Oid			dbid;
	pid_t		pid = 0;
	WorkerDb   *slot;
	TimestampTz until;

	if (dbname == NULL || worker_shared == NULL)
		return;
	dbid = get_database_oid(dbname, true);
	/* only for whoever may run the command: nobody else may stop a worker */
	if (!OidIsValid(dbid) || !dl_database_owner(dbid))
		return;
	until = GetCurrentTimestamp() + DISTLOCK_PAUSE_SECS * USECS_PER_SEC;
	SpinLockAcquire(&worker_shared->mutex);
	slot = worker_slot(dbid, true);
	if (slot != NULL)
	{
		slot->paused_until = until;
		pid = slot->pid;
	}
	SpinLockRelease(&worker_shared->mutex);
	if (pid != 0)
		(void) kill(pid, SIGTERM);
}

/* The database a utility statement needs to itself, or NULL. */
static const char *
worker_database_needed(Node *stmt)
{
	ListCell   *lc;

	switch (nodeTag(stmt))
	{
		case T_DropdbStmt:
			return ((DropdbStmt *) stmt)->dbname;
		case T_RenameStmt:
			if (((RenameStmt *) stmt)->renameType == OBJECT_DATABASE)
				return ((RenameStmt *) stmt)->subname;
			return NULL;
		case T_AlterDatabaseStmt:
			foreach(lc, ((AlterDatabaseStmt *) stmt)->options)
			{
				if (strcmp(((DefElem *) lfirst(lc))->defname, "tablespace") == 0)
					return ((AlterDatabaseStmt *) stmt)->dbname;
			}
			return NULL;
		case T_CreatedbStmt:
			foreach(lc, ((CreatedbStmt *) stmt)->options)
			{
				DefElem    *opt = (DefElem *) lfirst(lc);

				if (strcmp(opt->defname, "template") == 0 && opt->arg != NULL)
					return defGetString(opt);
			}
			return NULL;
		default:
			return NULL;
	}
}

/* Whether this transaction installs or updates distlock. */
static bool worker_installing = false;
static bool worker_callback_registered = false;

/*
 * Once distlock is installed or updated in a database, have the launcher
 * look at it now rather than when it next would.
 */
static void
worker_xact_callback(XactEvent event, void *arg)
{
	WorkerDb   *slot;
	int			launcher = -1;

	if (!worker_installing)
		return;
	if (event == XACT_EVENT_COMMIT)
	{
		SpinLockAcquire(&worker_shared->mutex);
		slot = worker_slot(MyDatabaseId, true);
		if (slot != NULL)
			slot->recheck = true;
		launcher = worker_shared->launcher_procno;
		SpinLockRelease(&worker_shared->mutex);
		if (launcher >= 0)
			SetLatch(&GetPGProcByNumber(launcher)->procLatch);
	}
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE)
		worker_installing = false;
}

/* Whether a utility statement installs or updates distlock. */
static bool
worker_installs(Node *stmt)
{
	if (IsA(stmt, CreateExtensionStmt))
		return strcmp(((CreateExtensionStmt *) stmt)->extname,
					  "distlock") == 0;
	if (IsA(stmt, AlterExtensionStmt))
		return strcmp(((AlterExtensionStmt *) stmt)->extname,
					  "distlock") == 0;
	return false;
}

static void
worker_process_utility(PlannedStmt *pstmt, const char *queryString,
					   bool readOnlyTree, ProcessUtilityContext context,
					   ParamListInfo params, QueryEnvironment *queryEnv,
					   DestReceiver *dest, QueryCompletion *qc)
{
	worker_leave_database(worker_database_needed(pstmt->utilityStmt));
	if (worker_installs(pstmt->utilityStmt) && worker_shared != NULL)
	{
		if (!worker_callback_registered)
		{
			RegisterXactCallback(worker_xact_callback, NULL);
			worker_callback_registered = true;
		}
		worker_installing = true;
	}

	if (prev_process_utility_hook)
		prev_process_utility_hook(pstmt, queryString, readOnlyTree, context,
								  params, queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
}

/* From _PG_init() while shared_preload_libraries are loaded. */
void
dl_worker_preload(void)
{
	BackgroundWorker worker;
	DlShmemRegion region = {
		"distlock workers", worker_shared_size, worker_shared_init, NULL,
		(void **) &worker_shared
	};

	dl_shmem_region(&region);
	prev_process_utility_hook = ProcessUtility_hook;
	ProcessUtility_hook = worker_process_utility;

	/* pg_upgrade's server runs no autovacuum, and no maintenance either */
	if (IsBinaryUpgrade)
		return;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 5;
	strlcpy(worker.bgw_library_name, "distlock", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "distlock_launcher_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "distlock launcher", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "distlock launcher", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}

/* Whether dbname is one distlock.maintenance_databases lets us serve. */
bool
dl_maintenance_serves(const char *dbname)
{
	char	   *list;
	List	   *names;
	ListCell   *lc;
	bool		found = false;

	if (dl_maintenance_databases == NULL || dl_maintenance_databases[0] == '\0')
		return true;
	list = pstrdup(dl_maintenance_databases);
	/* a list that does not parse serves nothing */
	if (SplitIdentifierString(list, ',', &names))
	{
		foreach(lc, names)
			found |= strcmp((char *) lfirst(lc), dbname) == 0;
	}
	list_free(names);
	pfree(list);
	return found;
}

/* Start the worker of database dbid; NULL if no worker slot is free. */
static BackgroundWorkerHandle *
launcher_start(Oid dbid, const char *dbname)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "distlock", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "distlock_maintenance_main",
			BGW_MAXLEN);
	snprintf(worker.bgw_name, BGW_MAXLEN, "distlock maintenance of %s",
			 dbname);
	strlcpy(worker.bgw_type, "distlock maintenance", BGW_MAXLEN);
	worker.bgw_main_arg = ObjectIdGetDatum(dbid);
	worker.bgw_notify_pid = MyProcPid;
	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
		return NULL;
	return handle;
}

/*
 * One look at the databases: start a worker where there should be one and
 * is none.
 */
static void
launcher_round(List **dbs)
{
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;
	TimestampTz now = GetCurrentTimestamp();
	ListCell   *lc;
	MemoryContext cxt = CurrentMemoryContext;

	foreach(lc, *dbs)
		((LauncherDb *) lfirst(lc))->seen = false;

	StartTransactionCommand();
	(void) GetTransactionSnapshot();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tup);
		LauncherDb *ldb = NULL;
		pid_t		pid;
		WorkerDb   *slot;
		bool		paused;
		bool		stopped;

		if (!db->datallowconn || db->datistemplate ||
			!dl_maintenance_serves(NameStr(db->datname)))
			continue;

		foreach(lc, *dbs)
		{
			if (((LauncherDb *) lfirst(lc))->dbid == db->oid)
				ldb = (LauncherDb *) lfirst(lc);
		}
		if (ldb == NULL)
		{
			MemoryContext old = MemoryContextSwitchTo(cxt);

			ldb = palloc0(sizeof(LauncherDb));
			ldb->dbid = db->oid;
			*dbs = lappend(*dbs, ldb);
			MemoryContextSwitchTo(old);
		}
		ldb->seen = true;

		/* its worker is running, or has gone: when to start it again */
		stopped = ldb->handle != NULL &&
			GetBackgroundWorkerPid(ldb->handle, &pid) == BGWH_STOPPED;
		SpinLockAcquire(&worker_shared->mutex);
		slot = worker_slot(db->oid, false);
		paused = slot != NULL && slot->paused_until > now;
		pid = slot != NULL ? slot->pid : 0;
		if (slot != NULL && slot->recheck)
		{
			slot->recheck = false;
			ldb->retry_at = 0;
		}
		if (stopped)
		{
			ldb->retry_at = slot != NULL && slot->restart ? now :
				now + (slot != NULL && slot->absent ?
					   DISTLOCK_ABSENT_RECHECK : DISTLOCK_FAILED_RESTART);
			if (slot != NULL)
				slot->restart = false;
		}
		SpinLockRelease(&worker_shared->mutex);
		if (stopped)
		{
			pfree(ldb->handle);
			ldb->handle = NULL;
		}
		/* a worker started before this launcher (re)started is adopted */
		if (ldb->handle != NULL || paused || now < ldb->retry_at ||
			(pid != 0 && BackendPidGetProc(pid) != NULL))
			continue;

		{
			MemoryContext old = MemoryContextSwitchTo(cxt);

			ldb->handle = launcher_start(db->oid, NameStr(db->datname));
			MemoryContextSwitchTo(old);
		}
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);

	/*
	 * forget what is over: slots without a worker or a pause, or a restart
	 * to make (a worker may have left for one after its database was
	 * looked at above; the next round starts it again at once)
	 */
	SpinLockAcquire(&worker_shared->mutex);
	for (int i = 0; i < worker_shared->ndbs; i++)
	{
		WorkerDb   *slot = &worker_shared->dbs[i];

		if (slot->pid == 0 && slot->paused_until <= now && !slot->restart)
			slot->dbid = InvalidOid;
	}
	SpinLockRelease(&worker_shared->mutex);

	/*
	 * ... and dropped databases (or ones no longer served), once their
	 * worker has stopped: one dropped while its worker ran is listed no
	 * more, so the loop above never finds that worker stopped
	 */
	foreach(lc, *dbs)
	{
		LauncherDb *ldb = (LauncherDb *) lfirst(lc);
		pid_t		pid;

		if (!ldb->seen && ldb->handle != NULL &&
			GetBackgroundWorkerPid(ldb->handle, &pid) == BGWH_STOPPED)
		{
			pfree(ldb->handle);
			ldb->handle = NULL;
		}
		if (!ldb->seen && ldb->handle == NULL)
		{
			WorkerDb   *slot;

			/* no restart for it: the next round frees its slot */
			SpinLockAcquire(&worker_shared->mutex);
			slot = worker_slot(ldb->dbid, false);
			if (slot != NULL)
				slot->restart = false;
			SpinLockRelease(&worker_shared->mutex);
			*dbs = foreach_delete_current(*dbs, lc);
			pfree(ldb);
		}
	}
}

/*
 * The launcher: look at the databases every DISTLOCK_LAUNCHER_NAPTIME_MS,
 * and whenever a worker starts or stops (the postmaster sets our latch).
 */
void
distlock_launcher_main(Datum arg)
{
	List	   *dbs = NIL;
	MemoryContext cxt;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	cxt = AllocSetContextCreate(TopMemoryContext, "distlock launcher",
								ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(cxt);
	SpinLockAcquire(&worker_shared->mutex);
	worker_shared->launcher_procno = dl_my_procno();
	SpinLockRelease(&worker_shared->mutex);

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (dl_maintenance_naptime > 0)
			launcher_round(&dbs);
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 DISTLOCK_LAUNCHER_NAPTIME_MS, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

/* Whether this database has a distlock with maintain() (1.1 and later). */
static bool
maintenance_installed(void)
{
	bool		isnull;

	if (!OidIsValid(get_extension_oid("distlock", true)))
		return false;
	if (SPI_execute("SELECT pg_catalog.to_regprocedure('distlock.maintain(boolean)')"
					" IS NOT NULL", true, 1) != SPI_OK_SELECT)
		elog(ERROR, "SPI_execute failed");
	return DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0],
									  SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * The rows of pg_db_role_setting that apply to this worker's connection
 * (its database's and its role's, and those for all of either), as text;
 * NULL if none.  Run under SPI, with a snapshot.
 */
static char *
maintenance_settings(void)
{
	Oid			types[2] = {OIDOID, OIDOID};
	Datum		values[2] = {ObjectIdGetDatum(MyDatabaseId),
	ObjectIdGetDatum(GetSessionUserId())};
	bool		isnull;
	Datum		value;

	if (SPI_execute_with_args("SELECT pg_catalog.string_agg(s.setdatabase"
							  " OPERATOR(pg_catalog.||) '/'"
							  " OPERATOR(pg_catalog.||) s.setrole"
							  " OPERATOR(pg_catalog.||) ':'"
							  " OPERATOR(pg_catalog.||) s.setconfig::pg_catalog.text,"
							  " ' ' ORDER BY s.setdatabase, s.setrole)"
							  " FROM pg_catalog.pg_db_role_setting s"
							  " WHERE s.setdatabase OPERATOR(pg_catalog.=) ANY (ARRAY[0, $1]::pg_catalog.oid[])"
							  " AND s.setrole OPERATOR(pg_catalog.=) ANY (ARRAY[0, $2]::pg_catalog.oid[])",
							  2, types, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "SPI_execute_with_args failed");
	value = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
						 &isnull);
	return isnull ? NULL : TextDatumGetCString(value);
}

/*
 * What maintenance_settings() said when the worker started, read just
 * after the connection applied them (a change committed in between waits
 * for the next one to be seen).
 */
static char *settings_at_start = NULL;

/* Whether the settings that apply to this worker have changed since. */
static bool
maintenance_settings_changed(void)
{
	char	   *now = maintenance_settings();

	if (now == NULL || settings_at_start == NULL)
		return (now == NULL) != (settings_at_start == NULL);
	return strcmp(now, settings_at_start) != 0;
}

/* When this worker last had maintain() scan distlock.locks. */
static TimestampTz locks_pruned_at = 0;

/* How often a worker has distlock.locks scanned for free rows. */
#define DISTLOCK_LOCK_PRUNE_EVERY	(60 * USECS_PER_SEC)

/*
 * One pass of maintain() in a transaction of its own; returns whether it
 * left more to do, -1 if distlock is not (or no longer) installed, or -2,
 * having done nothing, if the worker's settings have changed.
 */
static int
maintenance_pass(void)
{
	int			more = -1;
	TimestampTz now = GetCurrentTimestamp();
	bool		prune_locks = now - locks_pruned_at >= DISTLOCK_LOCK_PRUNE_EVERY;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "SELECT distlock.maintain()");

	if (maintenance_settings_changed())
		more = -2;
	else if (maintenance_installed())
	{
		bool		isnull;
		int			reaped;
		int			jobs;
		int			locks;

		if (SPI_execute(prune_locks ?
						"SELECT reaped, jobs_pruned, locks_pruned FROM distlock.maintain()" :
						"SELECT reaped, jobs_pruned, locks_pruned FROM distlock.maintain(false)",
						false, 1) != SPI_OK_SELECT)
			elog(ERROR, "SPI_execute failed");
		reaped = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
											 SPI_tuptable->tupdesc, 1, &isnull));
		jobs = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
										   SPI_tuptable->tupdesc, 2, &isnull));
		locks = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
											SPI_tuptable->tupdesc, 3, &isnull));
		/* a full batch of locks: scan again at the next pass */
		if (prune_locks)
			locks_pruned_at = locks >= DISTLOCK_PRUNE_BATCH ? 0 : now;
		more = reaped >= DISTLOCK_PRUNE_BATCH ||
			jobs >= DISTLOCK_PRUNE_BATCH || locks >= DISTLOCK_PRUNE_BATCH;
	}

	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
	return more;
}

static WorkerDb *maintenance_slot = NULL;

/* Why the worker ends, when it ends by itself. */
typedef enum MaintenanceEnd
{
	MAINTENANCE_FAILED,			/* an error, or told to */
	MAINTENANCE_ABSENT,			/* distlock is not installed */
	MAINTENANCE_RESTART			/* its settings changed */
} MaintenanceEnd;

/* However the worker ends, its slot no longer names it. */
static void
maintenance_on_exit(int code, Datum arg)
{
	MaintenanceEnd end = (MaintenanceEnd) DatumGetInt32(arg);

	SpinLockAcquire(&worker_shared->mutex);
	if (maintenance_slot->pid == MyProcPid)
	{
		maintenance_slot->pid = 0;
		maintenance_slot->absent = end == MAINTENANCE_ABSENT;
		maintenance_slot->restart = end == MAINTENANCE_RESTART;
	}
	SpinLockRelease(&worker_shared->mutex);
}

/* A database's worker: maintain() every naptime while distlock is there. */
void
distlock_maintenance_main(Datum arg)
{
	Oid			dbid = DatumGetObjectId(arg);
	WorkerDb   *slot;
	pid_t		other;
	TimestampTz now;
	MaintenanceEnd end = MAINTENANCE_FAILED;
	char	   *dbname;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	/*
	 * A command that needs the database to itself may be under way, or a
	 * worker (of a launcher that has since restarted) may be there already.
	 */
	SpinLockAcquire(&worker_shared->mutex);
	slot = worker_slot(dbid, true);
	other = slot != NULL ? slot->pid : 0;
	SpinLockRelease(&worker_shared->mutex);
	if (slot == NULL || (other != 0 && BackendPidGetProc(other) != NULL))
		proc_exit(0);
	now = GetCurrentTimestamp();
	SpinLockAcquire(&worker_shared->mutex);

	/*
	 * ... and none came in between.  The launcher frees a slot without a
	 * worker or a pause, and may have freed this one meanwhile (or given it
	 * to another database): take one again.
	 */
	if (slot->dbid != dbid)
		slot = worker_slot(dbid, true);
	if (slot != NULL && slot->paused_until <= now &&
		(slot->pid == other || slot->pid == 0))
		slot->pid = MyProcPid;
	else
		slot = NULL;
	SpinLockRelease(&worker_shared->mutex);
	if (slot == NULL)
		proc_exit(0);
	maintenance_slot = slot;
	before_shmem_exit(maintenance_on_exit, Int32GetDatum(MAINTENANCE_FAILED));

	BackgroundWorkerInitializeConnectionByOid(dbid, InvalidOid, 0);
	pgstat_report_appname("distlock maintenance");
	/*
	 * SKIP LOCKED deletions at READ COMMITTED, and passes that no timeout
	 * an application sets for its database ends, whatever the defaults say
	 * (as autovacuum does)
	 */
	SetConfigOption("default_transaction_isolation", "read committed",
					PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("default_transaction_read_only", "off",
					PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("statement_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("lock_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("idle_in_transaction_session_timeout", "0",
					PGC_SUSET, PGC_S_OVERRIDE);
	StartTransactionCommand();
	dbname = MemoryContextStrdup(TopMemoryContext,
								 get_database_name(MyDatabaseId));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	settings_at_start = maintenance_settings();
	if (settings_at_start != NULL)
		settings_at_start = MemoryContextStrdup(TopMemoryContext,
												settings_at_start);
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();

	for (;;)
	{
		int			more;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		/* the settings may have stopped the workers, or this one */
		if (dl_maintenance_naptime <= 0 || !dl_maintenance_serves(dbname))
			break;
		more = maintenance_pass();
		if (more < 0)
		{
			end = more == -1 ? MAINTENANCE_ABSENT : MAINTENANCE_RESTART;
			break;
		}
		if (more)
			continue;
		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 dl_maintenance_naptime, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}

	/* the callback registered above then finds nothing left to do */
	maintenance_on_exit(0, Int32GetDatum(end));
	proc_exit(0);
}
