/*-------------------------------------------------------------------------
 *
 * distlock.c
 *		Module initialisation for distlock.
 *
 * distlock needs nothing from shared_preload_libraries: every function works
 * right after CREATE EXTENSION, with all state in WAL-logged tables.
 * Preloaded, it also has shared memory for waking waiting calls at once
 * (wake.c; 17 and later find it without preloading) and a background
 * worker that reaps and prunes in every database (worker.c).  The
 * SQL-callable functions live in one file per concern: lease.c (locks and
 * fencing), session.c (sessions and reaping), queue.c (jobs), wait.c
 * (calls that wait), maintain.c (reaping and retention), throttle.c (rate
 * limits), advisory.c (helpers for advisory-lock users).
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/distlock.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/dbcommands.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/guc.h"

#include "distlock.h"

PG_MODULE_MAGIC;

PGDLLEXPORT void _PG_init(void);

/* distlock.direct_path: see its description below */
bool		dl_direct_path = true;

/* Whether distlock was loaded by shared_preload_libraries. */
static bool dl_preloaded = false;

/*
 * Whether the background workers reap and prune in this database
 * (worker.c); asked in a transaction.
 */
bool
dl_background_maintenance(void)
{
	static char *dbname = NULL;

	if (!dl_preloaded || dl_maintenance_naptime <= 0)
		return false;
	if (dbname == NULL)
		dbname = MemoryContextStrdup(TopMemoryContext,
									 get_database_name(MyDatabaseId));
	return dl_maintenance_serves(dbname);
}

/*
 * Module load callback: define the settings, and reserve the prefix so that
 * a misspelt "distlock.*" setting is an error instead of a silent
 * placeholder.
 */
void
_PG_init(void)
{
	DefineCustomBoolVariable("distlock.direct_path",
							 "Lets claims, acknowledgements and lease grants, renewals and releases at READ COMMITTED write the tables directly.",
							 "When off, they run as SQL statements, as at the stricter isolation levels. "
							 "Both give the same results; the direct path is faster.",
							 &dl_direct_path,
							 true,
							 PGC_USERSET,
							 0,
							 NULL,
							 NULL,
							 NULL);
	DefineCustomIntVariable("distlock.wait_poll_interval",
							"How often a waiting call looks again when nothing can wake it.",
							"Without shared memory (distlock not preloaded, before PostgreSQL 17) "
							"waiting calls are not woken, and look for work this often instead.",
							&dl_wait_poll_interval,
							20,
							1,
							1000,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL,
							NULL,
							NULL);
	DefineCustomIntVariable("distlock.job_retention",
							"How long finished jobs are kept.",
							"maintain() deletes completed, failed and cancelled jobs that finished longer ago; -1 keeps them.",
							&dl_job_retention,
							86400,
							-1,
							INT_MAX,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL,
							NULL,
							NULL);
	DefineCustomBoolVariable("distlock.delete_completed",
							 "Whether acknowledgements delete the jobs they complete.",
							 "On, complete() and the other acknowledgements delete the job instead of keeping it as completed until maintain() prunes it.",
							 &dl_delete_completed,
							 false,
							 PGC_SUSET,
							 0,
							 NULL,
							 NULL,
							 NULL);
	DefineCustomIntVariable("distlock.lock_retention",
							"How long a lock row is kept once nobody holds the lock.",
							"maintain() deletes lock rows free for longer; -1 keeps them.",
							&dl_lock_retention,
							86400,
							-1,
							INT_MAX,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL,
							NULL,
							NULL);
	DefineCustomIntVariable("distlock.maintenance_naptime",
							"How often the background worker calls maintain() in each database.",
							"0 stops the background workers; they work only when distlock is preloaded.",
							&dl_maintenance_naptime,
							1000,
							0,
							3600 * 1000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL,
							NULL,
							NULL);
	DefineCustomStringVariable("distlock.maintenance_databases",
							   "The databases the background worker serves.",
							   "A comma-separated list of database names; empty: every database where distlock is installed.",
							   &dl_maintenance_databases,
							   "",
							   PGC_SIGHUP,
							   GUC_LIST_INPUT,
							   NULL,
							   NULL,
							   NULL);
	DefineCustomIntVariable("distlock.heartbeat_persist_ahead",
							"How far ahead of its promise a heartbeat may write its session's expiry.",
							"With shared memory, heartbeats write a session's row only when it falls "
							"behind their promise, then this far ahead (at most three ttls): after a "
							"crash or failover a session may outlive its last heartbeat by as much. "
							"0: every heartbeat writes its promise.",
							&dl_heartbeat_persist_ahead,
							300000,
							0,
							INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL,
							NULL,
							NULL);
	MarkGUCPrefixReserved("distlock");

	if (process_shared_preload_libraries_in_progress)
	{
		dl_preloaded = true;
		dl_wake_preload();
		dl_position_preload();
		dl_beat_preload();
		dl_worker_preload();
	}
}
