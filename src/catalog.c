/*-------------------------------------------------------------------------
 *
 * catalog.c
 *		distlock's own catalog entries, looked up once per backend.
 *
 * The hot paths need the OIDs of distlock's schema, tables, indexes and
 * sequence, the attribute numbers of the columns they read and write, and
 * the OIDs of the job_status values.  They are looked up on first use
 * and kept until a relcache invalidation names one of the relations (ALTER
 * TABLE, DROP EXTENSION, a REINDEX...) or a syscache invalidation touches
 * pg_namespace (the schema renamed or given a new owner); the next call
 * then looks them up again, as pg_cron does for its job table.  Only an
 * index's OID changes while the extension stays installed (REINDEX ...
 * CONCURRENTLY), so a call reads index OIDs only once it has locked their
 * table: see dl_catalog_after_lock().
 *
 * An invalidation can arrive while the entries are being looked up (any
 * catalog access may process the invalidation queue); each one bumps a
 * counter, and a look-up that saw the counter move starts over, so the
 * cache is never marked valid with entries from before an invalidation.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/catalog.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_enum.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_proc.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "distlock.h"

static DistlockCatalog catalog;
static bool catalog_valid = false;
static bool catalog_filling = false;
static uint64 catalog_invalidations = 0;

static void
catalog_invalidate(void)
{
	catalog_valid = false;
	catalog_invalidations++;
}

/* A relcache invalidation: of one of ours, or of every relation (0). */
static void
catalog_relcache_callback(Datum arg, Oid relid)
{
	/* while looking up, we cannot tell which OIDs are ours yet */
	if (catalog_filling || !OidIsValid(relid) ||
		relid == catalog.jobs || relid == catalog.jobs_pkey ||
		relid == catalog.jobs_claim_idx ||
		relid == catalog.jobs_running_session_idx ||
		relid == catalog.sessions ||
		relid == catalog.sessions_pkey ||
		relid == catalog.sessions_expires_at_idx ||
		relid == catalog.locks ||
		relid == catalog.locks_pkey ||
		relid == catalog.locks_created_by_idx ||
		relid == catalog.token_seq)
		catalog_invalidate();
}

static void
catalog_syscache_callback(Datum arg, int cacheid, uint32 hashvalue)
{
	catalog_invalidate();
}

/* The OID of relation name in schema distlock. */
static Oid
catalog_relation(Oid schema, const char *name)
{
	Oid			relid = get_relname_relid(name, schema);

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("relation \"distlock.%s\" does not exist", name),
				 errhint("Update the extension to the library's version: ALTER EXTENSION distlock UPDATE (or, if its tables were altered by hand, reinstall it).")));
	return relid;
}

/* The attribute number of column name of relid. */
static AttrNumber
catalog_column(Oid relid, const char *name)
{
	AttrNumber	attno = get_attnum(relid, name);

	if (attno == InvalidAttrNumber)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" of relation \"%s\" does not exist",
						name, get_rel_name(relid)),
				 errhint("Update the extension to the library's version: ALTER EXTENSION distlock UPDATE (or, if its tables were altered by hand, reinstall it).")));
	return attno;
}

/* The OID of function name() in schema. */
static Oid
catalog_function(Oid schema, const char *name)
{
	Oid			fn = GetSysCacheOid3(PROCNAMEARGSNSP, Anum_pg_proc_oid,
									 CStringGetDatum(name),
									 PointerGetDatum(buildoidvector(NULL, 0)),
									 ObjectIdGetDatum(schema));

	if (!OidIsValid(fn))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("function \"distlock.%s()\" does not exist", name),
				 errhint("Update the extension to the library's version: ALTER EXTENSION distlock UPDATE (or, if its tables were altered by hand, reinstall it).")));
	return fn;
}

/* The OID of label of enum type typid. */
static Oid
catalog_enum_value(Oid typid, const char *label)
{
	HeapTuple	tup;
	Oid			oid;

	tup = SearchSysCache2(ENUMTYPOIDNAME, ObjectIdGetDatum(typid),
						  CStringGetDatum(label));
	if (!HeapTupleIsValid(tup))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("job status \"%s\" does not exist", label),
				 errhint("Update the extension to the library's version: ALTER EXTENSION distlock UPDATE (or, if its tables were altered by hand, reinstall it).")));
	oid = ((Form_pg_enum) GETSTRUCT(tup))->oid;
	ReleaseSysCache(tup);
	return oid;
}

static void
catalog_fill(DistlockCatalog *c)
{
	HeapTuple	tup;

	c->schema = get_namespace_oid("distlock", false);
	tup = SearchSysCache1(NAMESPACEOID, ObjectIdGetDatum(c->schema));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for schema %u", c->schema);
	c->schema_owner = ((Form_pg_namespace) GETSTRUCT(tup))->nspowner;
	ReleaseSysCache(tup);

	c->jobs = catalog_relation(c->schema, "jobs");
	c->jobs_pkey = catalog_relation(c->schema, "jobs_pkey");
	c->jobs_claim_idx = catalog_relation(c->schema, "jobs_claim_idx");
	c->jobs_running_session_idx = catalog_relation(c->schema,
												   "jobs_running_session_idx");
	c->sessions = catalog_relation(c->schema, "sessions");
	c->sessions_pkey = catalog_relation(c->schema, "sessions_pkey");
	c->sessions_expires_at_idx = catalog_relation(c->schema,
												  "sessions_expires_at_idx");
	c->locks = catalog_relation(c->schema, "locks");
	c->locks_pkey = catalog_relation(c->schema, "locks_pkey");
	c->locks_created_by_idx = catalog_relation(c->schema,
											   "locks_created_by_idx");
	c->token_seq = catalog_relation(c->schema, "token_seq");
	c->jobs_pending_fn = catalog_function(c->schema, "jobs_pending");

	c->job_id = catalog_column(c->jobs, "id");
	c->job_queue = catalog_column(c->jobs, "queue");
	c->job_status = catalog_column(c->jobs, "status");
	c->job_priority = catalog_column(c->jobs, "priority");
	c->job_run_at = catalog_column(c->jobs, "run_at");
	c->job_attempts = catalog_column(c->jobs, "attempts");
	c->job_session_id = catalog_column(c->jobs, "session_id");
	c->job_claimed_at = catalog_column(c->jobs, "claimed_at");
	c->job_finished_at = catalog_column(c->jobs, "finished_at");
	c->job_result = catalog_column(c->jobs, "result");
	c->job_created_by = catalog_column(c->jobs, "created_by");
	c->job_queue_owner = catalog_column(c->jobs, "queue_owner");
	c->lock_name = catalog_column(c->locks, "name");
	c->lock_owner = catalog_column(c->locks, "owner");
	c->lock_session_id = catalog_column(c->locks, "session_id");
	c->lock_token = catalog_column(c->locks, "token");
	c->lock_acquired_at = catalog_column(c->locks, "acquired_at");
	c->lock_renewed_at = catalog_column(c->locks, "renewed_at");
	c->lock_expires_at = catalog_column(c->locks, "expires_at");
	c->lock_hold_until = catalog_column(c->locks, "hold_until");
	c->lock_created_by = catalog_column(c->locks, "created_by");
	c->session_id = catalog_column(c->sessions, "id");
	c->session_expires_at = catalog_column(c->sessions, "expires_at");
	c->session_created_by = catalog_column(c->sessions, "created_by");
	c->session_ttl = catalog_column(c->sessions, "ttl");

	c->status_type = get_atttype(c->jobs, c->job_status);
	c->status_pending = catalog_enum_value(c->status_type, "pending");
	c->status_running = catalog_enum_value(c->status_type, "running");
	c->status_completed = catalog_enum_value(c->status_type, "completed");
}

/*
 * distlock's catalog entries, looked up now if an invalidation (or the
 * first use in this backend) calls for it.  Raises an error if the
 * extension is not installed.
 */
const DistlockCatalog *
dl_catalog(void)
{
	static bool registered = false;

	if (!registered)
	{
		CacheRegisterRelcacheCallback(catalog_relcache_callback, (Datum) 0);
		CacheRegisterSyscacheCallback(NAMESPACEOID, catalog_syscache_callback,
									  (Datum) 0);
		registered = true;
	}

	while (!catalog_valid)
	{
		uint64		seen = catalog_invalidations;
		DistlockCatalog fresh;

		catalog_filling = true;
		PG_TRY();
		{
			catalog_fill(&fresh);
		}
		PG_FINALLY();
		{
			catalog_filling = false;
		}
		PG_END_TRY();
		if (catalog_invalidations != seen)
			continue;			/* invalidated while we looked: again */
		catalog = fresh;
		catalog_valid = true;
	}
	return &catalog;
}

/*
 * Called when a call has just locked one of distlock's tables whose index
 * OIDs it reads next: looks the entries up again if taking the lock
 * processed an invalidation of them, so that those OIDs are of the table's
 * indexes now.
 *
 * Those read before the lock may be stale.  A transaction processes
 * invalidations when it starts and when it takes a relation lock it does
 * not hold yet, so one in a transaction block that has not locked the
 * table yet (or any, in the moment between its start and its lock) can
 * still hold the OID of an index that REINDEX ... CONCURRENTLY has since
 * swapped for a new one under the same name.  The old index is then marked
 * dead and dropped after waiting only for the table's lockers of that
 * moment: a call that kept its OID would scan an index no longer kept up
 * to date, missing the jobs and rows added since (and a claim would move
 * its queue's position past them), or fail to open it (XX000).  Once the
 * table is locked, the index found is kept up to date until the lock is
 * released: a later swap marks the old index dead only after every locker
 * of the table, readers included, is gone (indexcmds.c, phase 5).
 */
void
dl_catalog_after_lock(void)
{
	(void) dl_catalog();
}
