/*-------------------------------------------------------------------------
 *
 * direct.c
 *		The queue's hot paths at READ COMMITTED, on the tables directly.
 *
 * Through SPI, a claim is an UPDATE whose subquery walks jobs_claim_idx
 * FOR UPDATE SKIP LOCKED, and an acknowledgement an UPDATE joined to the
 * session: each call starts an executor for a plan of several nodes.  Here
 * the same index scans, row locks and heap updates are made directly,
 * through the table AM, in the order the executor makes them.
 *
 * claim: the walk of jobs_claim_idx is an index scan.  Each due pending job
 * it meets is locked FOR UPDATE with LockWaitSkip, as nodeLockRows.c does
 * for SKIP LOCKED, and then updated: the lock is refused (and the job
 * skipped) if another transaction holds or is changing the job, and also
 * if somebody changed it since the scan's snapshot (the version read is no
 * longer the latest: the lock is asked for that version only, and FOR
 * UPDATE would follow it to the latest one and test that again; claim()
 * may skip any job another transaction holds or has just changed, and the
 * next call sees it).  Once the lock is ours nobody else can change the
 * version, so the update that follows succeeds without waiting.  No job is
 * claimed twice: of two claimers that read the same pending version, the
 * second finds it locked (or, once the first has committed, updated) and
 * moves on; if the first rolls back, the version is pending again for
 * whoever comes next.  Our own earlier versions of jobs claimed in the same
 * call are seen as changed by this command and skipped (the Halloween
 * guard); a lock this transaction already holds (a reap's FOR UPDATE) is
 * granted again.
 *
 * A session acting for itself reads its row by sessions_pkey, and claim()
 * looks at the first entry of sessions_expires_at_idx to see whether some
 * session has expired (session.c says why that read needs no row lock).
 *
 * complete: the job is read by jobs_pkey and updated if it is running for
 * the session, waiting for whoever holds it; if somebody changed it since
 * our snapshot, it is read again with a new one, as the executor's
 * EvalPlanQual would recheck the latest version.
 *
 * Only at READ COMMITTED: at REPEATABLE READ and SERIALIZABLE a job changed
 * since the transaction's snapshot must fail with 40001, as the SQL paths
 * (queue.c) do through the executor.  A table somebody has given a
 * trigger, a rule, forced row security, a CHECK constraint, a stored
 * generated column, an inheritance child, an invalid or deferred index, or
 * a server with an ExecutorCheckPerms_hook also takes the SQL paths, so
 * that they apply (jobs_plain()); and so does every call when the setting
 * distlock.direct_path is off.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/direct.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/sysattr.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_enum.h"
#include "catalog/pg_index.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "parser/parse_relation.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/uuid.h"

#include "distlock.h"

/* distlock.jobs opened for direct updates. */
typedef struct JobsTable
{
	Relation	rel;
	EState	   *estate;
	ResultRelInfo *result_rel;
	CommandId	cid;
	TupleTableSlot *old;		/* a version read */
	TupleTableSlot *locked;		/* the same version, once locked */
	TupleTableSlot *new;		/* the version written */
	/* attribute numbers */
	AttrNumber	queue;
	AttrNumber	status;
	AttrNumber	run_at;
	AttrNumber	attempts;
	AttrNumber	session_id;
	AttrNumber	claimed_at;
	AttrNumber	finished_at;
	AttrNumber	result;
	AttrNumber	created_by;
	/* job_status values */
	Oid			pending;
	Oid			running;
	Oid			completed;
} JobsTable;

/* The attribute number of column name of one of distlock's tables. */
static AttrNumber
table_column(Relation rel, const char *name)
{
	int			attno = attnameAttNum(rel, name, false);

	if (attno == InvalidAttrNumber)
		elog(ERROR, "column distlock.%s.%s does not exist",
			 RelationGetRelationName(rel), name);
	return (AttrNumber) attno;
}

/* The OID of label of enum type typid. */
static Oid
jobs_enum_value(Oid typid, const char *label)
{
	HeapTuple	tup;
	Oid			oid;

	tup = SearchSysCache2(ENUMTYPOIDNAME, ObjectIdGetDatum(typid),
						  CStringGetDatum(label));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "job status \"%s\" does not exist", label);
	oid = ((Form_pg_enum) GETSTRUCT(tup))->oid;
	ReleaseSysCache(tup);
	return oid;
}

/*
 * Whether an UPDATE of rel would do nothing but what the direct paths do:
 * no trigger, rule or forced row security, no CHECK constraint or stored
 * generated column (ExecUpdate would check or compute them), no
 * inheritance children, and no ExecutorCheckPerms_hook that would want to
 * see the statement (sepgsql).  Only the table's owner can add any of
 * these; the SQL paths then apply them.
 */
static bool
jobs_plain(Relation rel)
{
	TupleConstr *constr = RelationGetDescr(rel)->constr;

	return rel->trigdesc == NULL && rel->rd_rules == NULL &&
		!rel->rd_rel->relforcerowsecurity &&
		!rel->rd_rel->relhassubclass &&
		(constr == NULL ||
		 (constr->num_check == 0 && !constr->has_generated_stored)) &&
		ExecutorCheckPerms_hook == NULL;
}

/*
 * Open distlock.jobs to update the columns listed (a null-terminated list
 * of names) with its indexes kept as an UPDATE statement would keep them.
 * Returns false, opening nothing, where the direct paths do not apply.
 */
static bool
jobs_open(JobsTable *jt, const char *const *updated)
{
	RangeTblEntry *rte;
	Oid			status_type;

	if (!dl_direct_path || IsolationUsesXactSnapshot())
		return false;
	/* what this transaction did so far is visible to our snapshots */
	CommandCounterIncrement();
	jt->rel = table_open(get_relname_relid("jobs",
											get_namespace_oid("distlock", false)),
						 RowExclusiveLock);
	if (!jobs_plain(jt->rel))
	{
		table_close(jt->rel, NoLock);
		return false;
	}
	CheckCmdReplicaIdentity(jt->rel, CMD_UPDATE);

	jt->queue = table_column(jt->rel, "queue");
	jt->status = table_column(jt->rel, "status");
	jt->run_at = table_column(jt->rel, "run_at");
	jt->attempts = table_column(jt->rel, "attempts");
	jt->session_id = table_column(jt->rel, "session_id");
	jt->claimed_at = table_column(jt->rel, "claimed_at");
	jt->finished_at = table_column(jt->rel, "finished_at");
	jt->result = table_column(jt->rel, "result");
	jt->created_by = table_column(jt->rel, "created_by");
	status_type = TupleDescAttr(RelationGetDescr(jt->rel),
								jt->status - 1)->atttypid;
	jt->pending = jobs_enum_value(status_type, "pending");
	jt->running = jobs_enum_value(status_type, "running");
	jt->completed = jobs_enum_value(status_type, "completed");

	/*
	 * The range table of the UPDATE we stand in for: it tells index_insert()
	 * which indexes an update leaves unchanged (a hint for bottom-up
	 * deletion).
	 */
	rte = makeNode(RangeTblEntry);
	rte->rtekind = RTE_RELATION;
	rte->relid = RelationGetRelid(jt->rel);
	rte->relkind = jt->rel->rd_rel->relkind;
	rte->rellockmode = RowExclusiveLock;
	for (; *updated; updated++)
		rte->updatedCols = bms_add_member(rte->updatedCols,
										  table_column(jt->rel, *updated) -
										  FirstLowInvalidHeapAttributeNumber);
	jt->estate = CreateExecutorState();
	ExecInitRangeTable(jt->estate, list_make1(rte));
	jt->result_rel = makeNode(ResultRelInfo);
	InitResultRelInfo(jt->result_rel, jt->rel, 1, NULL, 0);
	ExecOpenIndices(jt->result_rel, false);
	for (int i = 0; i < jt->result_rel->ri_NumIndices; i++)
	{
		Form_pg_index index = jt->result_rel->ri_IndexRelationDescs[i]->rd_index;

		/*
		 * An index left invalid (a failed CREATE INDEX CONCURRENTLY) would
		 * give our index scans wrong answers, and a deferred unique check
		 * would be ours to make: let the executor deal with either.
		 */
		if (!index->indisvalid || !index->indimmediate)
		{
			ExecCloseIndices(jt->result_rel);
			FreeExecutorState(jt->estate);
			table_close(jt->rel, NoLock);
			return false;
		}
	}

	jt->old = table_slot_create(jt->rel, NULL);
	jt->locked = table_slot_create(jt->rel, NULL);
	jt->new = MakeSingleTupleTableSlot(RelationGetDescr(jt->rel),
									   &TTSOpsVirtual);
	jt->cid = GetCurrentCommandId(true);
	return true;
}

static void
jobs_close(JobsTable *jt)
{
	ExecDropSingleTupleTableSlot(jt->old);
	ExecDropSingleTupleTableSlot(jt->locked);
	ExecDropSingleTupleTableSlot(jt->new);
	ExecCloseIndices(jt->result_rel);
	FreeExecutorState(jt->estate);
	table_close(jt->rel, NoLock);
	/* our updates are visible to the rest of the call */
	CommandCounterIncrement();
}

/* Start jt->new as a copy of jt->old, whose values it points to. */
static void
jobs_new_from_old(JobsTable *jt)
{
	int			natts = RelationGetDescr(jt->rel)->natts;

	slot_getallattrs(jt->old);
	ExecClearTuple(jt->new);
	memcpy(jt->new->tts_values, jt->old->tts_values, natts * sizeof(Datum));
	memcpy(jt->new->tts_isnull, jt->old->tts_isnull, natts * sizeof(bool));
}

static void
jobs_set(JobsTable *jt, AttrNumber att, Datum value, bool isnull)
{
	jt->new->tts_values[att - 1] = value;
	jt->new->tts_isnull[att - 1] = isnull;
}

/*
 * Lock the version in jt->old FOR UPDATE, unless another transaction holds
 * or is changing it or it is no longer the latest version, in which case
 * return false at once (SKIP LOCKED's rule; see the header comment).
 */
static bool
jobs_lock_or_skip(JobsTable *jt, Snapshot snapshot)
{
	TM_FailureData tmfd;

	return table_tuple_lock(jt->rel, &jt->old->tts_tid, snapshot, jt->locked,
							jt->cid, LockTupleExclusive, LockWaitSkip, 0,
							&tmfd) == TM_Ok;
}

/*
 * Replace the version in jt->old by jt->new, waiting for whoever holds it
 * if wait, and add its index entries.  jt->new may point into jt->old: the
 * update copies its values into a tuple of its own before it touches the
 * page.
 */
static TM_Result
jobs_update(JobsTable *jt, Snapshot snapshot, bool wait)
{
	TM_FailureData tmfd;
	LockTupleMode lockmode;
	bool		update_indexes;
	TM_Result	result;

	ExecStoreVirtualTuple(jt->new);
	result = table_tuple_update(jt->rel, &jt->old->tts_tid, jt->new, jt->cid,
								snapshot, InvalidSnapshot, wait, &tmfd,
								&lockmode, &update_indexes);
	if (result == TM_Ok && update_indexes)
	{
		/* a deferred unique or exclusion check would be left to us */
		if (ExecInsertIndexTuples(jt->result_rel, jt->new, jt->estate,
								  true, false, NULL, NIL) != NIL)
			elog(ERROR, "unexpected deferred index check on distlock.jobs");
		ResetPerTupleExprContext(jt->estate);
	}
	return result;
}

/* Index name of schema distlock, opened in lockmode. */
static Relation
direct_index(const char *name, LOCKMODE lockmode)
{
	return index_open(get_relname_relid(name,
										get_namespace_oid("distlock", false)),
					  lockmode);
}

/*
 * Begin a scan of index (of table heap) under snapshot for the entries
 * whose first column compares to value by strategy (proc: its operator's
 * function).
 */
static IndexScanDesc
direct_scan(Relation heap, Relation index, Snapshot snapshot,
			StrategyNumber strategy, RegProcedure proc, Datum value)
{
	ScanKeyData key;
	IndexScanDesc scan;

	ScanKeyEntryInitialize(&key, 0, 1, strategy, InvalidOid,
						   index->rd_indcollation[0], proc, value);
	scan = index_beginscan(heap, index, snapshot, 1, 0);
	index_rescan(scan, &key, 1, NULL, 0);
	return scan;
}

/*
 * Begin a scan of index (of distlock.jobs) for column 1 = value, under a
 * new snapshot that sees what the transaction has done so far.
 */
static IndexScanDesc
jobs_scan(JobsTable *jt, Relation index, RegProcedure eq, Datum value)
{
	return direct_scan(jt->rel, index, RegisterSnapshot(GetLatestSnapshot()),
					   BTEqualStrategyNumber, eq, value);
}

static void
jobs_scan_end(IndexScanDesc scan)
{
	Snapshot	snapshot = scan->xs_snapshot;

	index_endscan(scan);
	UnregisterSnapshot(snapshot);
}

/*
 * Claim up to max_jobs due (run_at <= now) pending jobs of queue for
 * session_id, in claim order, skipping jobs of roles the caller may not
 * act for; put them, as they now are, into store and their number into
 * *claimed.  The caller holds the session's use lock and has found it live
 * at now.  Returns false, doing nothing, where the direct paths do not
 * apply.
 */
bool
dl_claim_direct(DistlockCall *call, Datum queue, Datum session_id,
				int32 max_jobs, TimestampTz now, Tuplestorestate *store,
				uint64 *claimed)
{
	static const char *const updated[] =
	{"status", "attempts", "session_id", "claimed_at", NULL};
	JobsTable	jt;
	Relation	idx;
	IndexScanDesc scan;
	uint64		n = 0;

	if (!jobs_open(&jt, updated))
		return false;
	idx = direct_index("jobs_claim_idx", RowExclusiveLock);
	scan = jobs_scan(&jt, idx, F_TEXTEQ, queue);

	while (n < (uint64) max_jobs &&
		   index_getnext_slot(scan, ForwardScanDirection, jt.old))
	{
		Datum	   *v;

		CHECK_FOR_INTERRUPTS();
		jobs_new_from_old(&jt);
		v = jt.old->tts_values;
		if (DatumGetObjectId(v[jt.status - 1]) != jt.pending ||
			DatumGetTimestampTz(v[jt.run_at - 1]) > now ||
			!dl_may_act_for(call, DatumGetObjectId(v[jt.created_by - 1])))
			continue;
		if (!jobs_lock_or_skip(&jt, scan->xs_snapshot))
			continue;			/* held or changed by somebody else: skip */

		jobs_set(&jt, jt.status, ObjectIdGetDatum(jt.running), false);
		jobs_set(&jt, jt.session_id, session_id, false);
		jobs_set(&jt, jt.claimed_at, TimestampTzGetDatum(now), false);
		jobs_set(&jt, jt.attempts,
				 Int32GetDatum(DatumGetInt32(v[jt.attempts - 1]) + 1), false);
		/* the version is locked by us: the update cannot find it changed */
		if (jobs_update(&jt, scan->xs_snapshot, true) != TM_Ok)
			elog(ERROR, "could not update locked job");

		tuplestore_puttupleslot(store, jt.new);
		n++;
	}

	jobs_scan_end(scan);
	index_close(idx, NoLock);
	jobs_close(&jt);
	*claimed = n;
	return true;
}

/*
 * Complete job_id with result (NULL: none) at now if it is running for
 * session_id, whose use lock the caller holds and which it has found live.
 * *done says whether it was; *queue, if given, is then the job's queue
 * (palloc'd).  Returns false, doing nothing, where the direct paths do not
 * apply.
 */
bool
dl_complete_direct(Datum job_id, Datum session_id, Datum result,
				   bool result_isnull, TimestampTz now, bool *done,
				   text **queue)
{
	static const char *const updated[] =
	{"status", "finished_at", "result", NULL};
	JobsTable	jt;
	Relation	idx;
	TM_Result	tm = TM_Updated;

	if (!jobs_open(&jt, updated))
		return false;
	idx = direct_index("jobs_pkey", RowExclusiveLock);
	*done = false;

	/* changed by somebody else since our snapshot: look again */
	while (tm == TM_Updated)
	{
		IndexScanDesc scan = jobs_scan(&jt, idx, F_INT8EQ, job_id);
		Datum	   *v;

		tm = TM_Invisible;
		if (index_getnext_slot(scan, ForwardScanDirection, jt.old))
		{
			jobs_new_from_old(&jt);
			v = jt.old->tts_values;
			if (DatumGetObjectId(v[jt.status - 1]) == jt.running &&
				!jt.old->tts_isnull[jt.session_id - 1] &&
				memcmp(DatumGetUUIDP(v[jt.session_id - 1]),
					   DatumGetUUIDP(session_id), UUID_LEN) == 0)
			{
				jobs_set(&jt, jt.status, ObjectIdGetDatum(jt.completed), false);
				jobs_set(&jt, jt.finished_at, TimestampTzGetDatum(now), false);
				jobs_set(&jt, jt.result, result, result_isnull);
				tm = jobs_update(&jt, scan->xs_snapshot, true);
				*done = tm == TM_Ok;
				if (*done && queue)
					*queue = DatumGetTextPCopy(v[jt.queue - 1]);
			}
		}
		jobs_scan_end(scan);
	}

	index_close(idx, NoLock);
	jobs_close(&jt);
	return true;
}

/*
 * Read session_id's row as committed now, and as this transaction has
 * changed it so far: its expires_at (if expires is given) and created_by.
 * Returns false if there is none.  If others_expired is given, it is set
 * to whether any session had expired when the row was read (for claim's
 * reaping).  A plain read, without a row lock: see session.c for when that
 * can be trusted.
 */
bool
dl_session_read(Datum session_id, TimestampTz *expires, Oid *creator,
				bool *others_expired)
{
	Relation	rel;
	Relation	idx;
	Snapshot	snapshot;
	IndexScanDesc scan;
	TupleTableSlot *slot;
	bool		found;

	/* what earlier commands of this statement did is visible (a close) */
	CommandCounterIncrement();
	rel = table_open(get_relname_relid("sessions",
									   get_namespace_oid("distlock", false)),
					 AccessShareLock);
	slot = table_slot_create(rel, NULL);
	snapshot = RegisterSnapshot(GetLatestSnapshot());

	idx = direct_index("sessions_pkey", AccessShareLock);
	scan = direct_scan(rel, idx, snapshot, BTEqualStrategyNumber, F_UUID_EQ,
					   session_id);
	found = index_getnext_slot(scan, ForwardScanDirection, slot);
	if (found)
	{
		bool		isnull;

		if (expires)
			*expires = DatumGetTimestampTz(slot_getattr(slot,
														table_column(rel, "expires_at"),
														&isnull));
		*creator = DatumGetObjectId(slot_getattr(slot,
												 table_column(rel, "created_by"),
												 &isnull));
	}
	index_endscan(scan);
	index_close(idx, NoLock);

	/* the first entry of sessions_expires_at_idx, if it is due */
	if (found && others_expired)
	{
		idx = direct_index("sessions_expires_at_idx", AccessShareLock);
		scan = direct_scan(rel, idx, snapshot, BTLessEqualStrategyNumber,
						   F_TIMESTAMPTZ_LE,
						   TimestampTzGetDatum(GetCurrentTimestamp()));
		*others_expired = index_getnext_slot(scan, ForwardScanDirection, slot);
		index_endscan(scan);
		index_close(idx, NoLock);
	}

	UnregisterSnapshot(snapshot);
	ExecDropSingleTupleTableSlot(slot);
	table_close(rel, NoLock);
	return found;
}
