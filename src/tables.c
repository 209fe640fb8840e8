/*-------------------------------------------------------------------------
 *
 * tables.c
 *		distlock's tables read and updated through the table AM directly.
 *
 * Through SPI, a claim is an UPDATE whose subquery walks jobs_claim_idx
 * FOR UPDATE SKIP LOCKED, and an acknowledgement an UPDATE by jobs_pkey:
 * each call starts an executor for a plan of several nodes.  The direct
 * paths of queue.c (and the reads of session.c and lease.c) make the same
 * index scans, row locks and heap updates themselves, through the table
 * AM, in the order the executor makes them; this file has the pieces they
 * share.
 *
 * A row lock asked for with LockWaitSkip (dl_jobs_lock_or_skip()) is what
 * nodeLockRows.c asks for under SKIP LOCKED: it is refused, and the job
 * skipped, if another transaction holds or is changing the version, and
 * also if somebody changed it since the scan's snapshot (the lock is asked
 * for that version only; FOR UPDATE would follow it to the latest one and
 * test that again); one that another running transaction holds or is
 * changing, as a plain xid in its xmax, is refused after a look under the
 * page's share lock, without heap_lock_tuple()'s locks.  Once the lock is
 * ours nobody else can change the version, so the update that follows
 * succeeds without waiting.  Versions this command itself updated (a job
 * claimed earlier in the same call) are refused too, as TM_SelfModified:
 * the Halloween guard.  A lock this transaction already holds is granted
 * again.
 *
 * A lease's lock row, once locked (dl_version_lock()), is rewritten the
 * same way (dl_row_update_begin(), lease.c), where distlock.locks has no
 * trigger, no NOT NULL on a column the lease may empty, and nothing else
 * table_not_plain() or update_open() finds.
 *
 * dl_jobs_open() says where the direct paths do not apply: at REPEATABLE
 * READ and SERIALIZABLE (a job changed since the transaction's snapshot
 * must fail with 40001, as the SQL paths do through the executor), when
 * distlock.direct_path is off, and when distlock.jobs has something only
 * the executor applies: a trigger, a rule, forced row security, a CHECK
 * constraint, a generated column, an inheritance child, an invalid
 * or deferred index, a table access method other than heap, or a server
 * with an ExecutorCheckPerms_hook.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/tables.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/itup.h"
#include "access/sysattr.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_enum.h"
#include "catalog/pg_index.h"
#include "catalog/pg_trigger.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "optimizer/optimizer.h"
#include "parser/parse_relation.h"
#include "storage/bufmgr.h"
#include "storage/procarray.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/uuid.h"

#include "compat.h"
#include "distlock.h"

/*
 * Why an UPDATE of rel would do more than the direct paths do, triggers
 * aside, or NULL if it would not: it needs a heap table (they read its
 * versions' headers: dl_jobs_lock_or_skip(), version_fetch()), no rule or
 * forced row security, no CHECK constraint or generated column (ExecUpdate
 * would check or compute them; a virtual one, PostgreSQL 18, may be NOT
 * NULL), no inheritance children, and no ExecutorCheckPerms_hook that
 * would want to see the statement (sepgsql).
 * Only the table's owner can add any of these; the SQL paths then apply
 * them.
 */
static const char *
table_not_plain(Relation rel)
{
	TupleConstr *constr = RelationGetDescr(rel)->constr;

	if (rel->rd_rel->relam != HEAP_TABLE_AM_OID)
		return "Its access method is not heap.";
	if (rel->rd_rules != NULL)
		return "It has a rule.";
	if (rel->rd_rel->relforcerowsecurity)
		return "It has forced row security.";
	/* set until an ANALYZE finds no child (acquire_inherited_sample_rows) */
	if (rel->rd_rel->relhassubclass)
		return "It has or had an inheritance child: pg_class.relhassubclass stays set until an ANALYZE of the table finds none.";
	if (constr != NULL && constr->num_check > 0)
		return "It has a CHECK constraint.";
	if (constr != NULL &&
		(constr->has_generated_stored || dl_has_generated_virtual(constr)))
		return "It has a generated column.";
	if (ExecutorCheckPerms_hook != NULL)
		return "A loaded module checks the permissions of statements (ExecutorCheckPerms_hook, as sepgsql).";
	return NULL;
}

/*
 * Whether table relid has nothing only the executor applies
 * (table_not_plain()): a row lock taken directly then locks what the
 * statement after it finds.
 */
bool
dl_table_plain(Oid relid)
{
	Relation	rel = table_open(relid, AccessShareLock);
	bool		plain = table_not_plain(rel) == NULL;

	table_close(rel, NoLock);
	return plain;
}

/* Why, if at all, a NOT NULL on a column the call may empty needs ExecUpdate */
static const char *
not_null_column(Relation rel, const AttrNumber *nullable, int nnullable)
{
	for (int i = 0; i < nnullable; i++)
	{
		Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel),
											  nullable[i] - 1);

		if (att->attnotnull)
			return psprintf("Column \"%s\", which the call may set to null, is NOT NULL.",
							NameStr(att->attname));
	}
	return NULL;
}

/*
 * Why trigger t sends the calls to the SQL path: a user's trigger by its
 * name; one that checks a constraint by the constraint's name, since its
 * own carries an OID.
 */
static const char *
trigger_reason(const Trigger *t)
{
	if (OidIsValid(t->tgconstraint))
		return psprintf("Its constraint \"%s\" is checked by a trigger.",
						get_constraint_name(t->tgconstraint));
	return psprintf("It has trigger \"%s\".", t->tgname);
}

/*
 * rel, opened by the caller, has something only the executor applies
 * (why, from table_not_plain(), jobs_not_plain(), update_open()): close
 * it, and say so at DEBUG1, since the call then takes the SQL path and
 * nothing else shows it.  A test that must run the direct path asserts
 * that this is not said; a user who finds the calls slower can see why.
 */
static void
direct_declined(Relation rel, const char *why)
{
	ereport(DEBUG1,
			(errmsg_internal("direct path not used for table \"%s.%s\"",
							 get_namespace_name(RelationGetNamespace(rel)),
							 RelationGetRelationName(rel)),
			 errdetail_internal("%s", why)));
	table_close(rel, NoLock);
}

/*
 * Why an UPDATE of distlock.jobs would do more than the direct paths do,
 * or NULL if it would not: it needs table_not_plain() to find nothing, no
 * trigger but distlock's own (jobs_pending, jobs_unpending), and no NOT
 * NULL on result.  The two triggers note versions made pending and taken
 * out of pending (position.c): the direct paths make none pending, and a
 * direct claim notes what it takes itself, so they have nothing to do for
 * them.  *positions says whether both are there and fire always, as claim
 * positions need.
 */
static const char *
jobs_not_plain(Relation rel, const DistlockCatalog *cat, bool *positions)
{
	TriggerDesc *trig = rel->trigdesc;
	const char *why;

	*positions = false;
	if (trig != NULL)
	{
		int			always = 0;

		for (int i = 0; i < trig->numtriggers; i++)
		{
			Trigger    *t = &trig->triggers[i];

			if (t->tgfoid != cat->jobs_pending_fn ||
				!TRIGGER_FOR_ROW(t->tgtype) || t->tgnattr != 0)
				return trigger_reason(t);
			if (t->tgenabled == TRIGGER_FIRES_ALWAYS)
				always++;
		}
		/* jobs_pending and jobs_unpending, both firing always */
		*positions = trig->numtriggers == 2 && always == 2 &&
			trig->trig_insert_after_row && trig->trig_update_after_row &&
			trig->trig_update_before_row && trig->trig_delete_before_row;
	}
	/* result is the one column the direct paths may set to NULL */
	why = not_null_column(rel, &cat->job_result, 1);
	return why ? why : table_not_plain(rel);
}

/*
 * The partial indexes' predicates, ready to evaluate, kept for the life of
 * the backend: ExecInsertIndexTuples() would otherwise plan and compile
 * each of them again for every call (an estate lasts one call), which cost
 * a tenth of a complete().  An entry is used only for the index it was made
 * for and while the predicate is still the same tree.  An entry whose index
 * is gone (a REINDEX ... CONCURRENTLY gives each index a new OID) makes
 * room for another; nothing else can be using it, since the index could be
 * dropped only once no transaction held its table.
 */
typedef struct PredicateEntry
{
	Oid			index;
	List	   *predicate;		/* as IndexInfo has it */
	ExprState  *state;
	MemoryContext cxt;			/* holds the two above, or NULL */
} PredicateEntry;

#define MAX_CACHED_PREDICATES	8

static PredicateEntry predicates[MAX_CACHED_PREDICATES];
static int	npredicates = 0;

/* A free entry, making one of an entry whose index is gone; NULL: none. */
static PredicateEntry *
predicate_free_entry(void)
{
	if (npredicates < MAX_CACHED_PREDICATES)
		return &predicates[npredicates++];
	for (int j = 0; j < npredicates; j++)
	{
		if (!SearchSysCacheExists1(RELOID,
								   ObjectIdGetDatum(predicates[j].index)))
		{
			/* (an entry left incomplete by an error has InvalidOid) */
			if (predicates[j].cxt)
				MemoryContextDelete(predicates[j].cxt);
			predicates[j].cxt = NULL;
			return &predicates[j];
		}
	}
	return NULL;
}

static void
jobs_predicates(ResultRelInfo *rri)
{
	for (int i = 0; i < rri->ri_NumIndices; i++)
	{
		IndexInfo  *ii = rri->ri_IndexRelationInfo[i];
		Oid			index = RelationGetRelid(rri->ri_IndexRelationDescs[i]);
		PredicateEntry *entry = NULL;
		MemoryContext old;

		if (ii->ii_Predicate == NIL)
			continue;
		for (int j = 0; j < npredicates && !entry; j++)
		{
			if (predicates[j].index == index)
				entry = &predicates[j];
		}
		/* an OID used again by another index: the executor prepares it */
		if (entry && !equal(entry->predicate, ii->ii_Predicate))
			continue;
		if (!entry)
		{
			entry = predicate_free_entry();
			if (!entry)
				continue;		/* the executor prepares it */
			entry->index = InvalidOid;	/* until it is complete */
			entry->cxt = AllocSetContextCreate(TopMemoryContext,
											   "distlock index predicate",
											   ALLOCSET_SMALL_SIZES);
			old = MemoryContextSwitchTo(entry->cxt);
			entry->predicate = copyObject(ii->ii_Predicate);
			entry->state = ExecInitQual((List *) expression_planner((Expr *) copyObject(ii->ii_Predicate)),
										NULL);
			MemoryContextSwitchTo(old);
			entry->index = index;
		}
		ii->ii_PredicateState = entry->state;
	}
}

/*
 * Set up *estate and *result_rel to update the columns of rel listed
 * (nupdated attribute numbers) with its indexes kept as an UPDATE
 * statement would keep them, and return NULL; or, keeping nothing, say
 * why an index is one the direct paths leave to the executor.
 */
static const char *
update_open(Relation rel, const AttrNumber *updated, int nupdated,
			EState **estate, ResultRelInfo **result_rel)
{
	RangeTblEntry *rte;
	Bitmapset  *updated_cols = NULL;
	ResultRelInfo *rri;

	CheckCmdReplicaIdentity(rel, CMD_UPDATE);

	/*
	 * The range table of the UPDATE we stand in for: it tells index_insert()
	 * which indexes an update leaves unchanged (a hint for bottom-up
	 * deletion).
	 */
	rte = makeNode(RangeTblEntry);
	rte->rtekind = RTE_RELATION;
	rte->relid = RelationGetRelid(rel);
	rte->relkind = rel->rd_rel->relkind;
	rte->rellockmode = RowExclusiveLock;
	for (int i = 0; i < nupdated; i++)
		updated_cols = bms_add_member(updated_cols,
									  updated[i] -
									  FirstLowInvalidHeapAttributeNumber);
	*estate = CreateExecutorState();
	dl_init_update_range_table(*estate, rte, updated_cols);
	rri = makeNode(ResultRelInfo);
	InitResultRelInfo(rri, rel, 1, NULL, 0);
	ExecOpenIndices(rri, false);
	for (int i = 0; i < rri->ri_NumIndices; i++)
	{
		Form_pg_index index = rri->ri_IndexRelationDescs[i]->rd_index;

		/*
		 * An index left invalid (a failed CREATE INDEX CONCURRENTLY) would
		 * give our index scans wrong answers, and a deferred unique check
		 * would be ours to make: let the executor deal with either.  (A
		 * deferrable constraint's recheck trigger sends the call to the
		 * SQL path before this; the test stands for an index marked
		 * deferred without one.)
		 */
		if (!index->indisvalid || !index->indimmediate)
		{
			char	   *why = psprintf(index->indisvalid ?
									   "Its index \"%s\" checks uniqueness at commit." :
									   "Its index \"%s\" is not valid.",
									   RelationGetRelationName(rri->ri_IndexRelationDescs[i]));

			ExecCloseIndices(rri);
			FreeExecutorState(*estate);
			return why;
		}
	}
	jobs_predicates(rri);
	*result_rel = rri;
	return NULL;
}

/*
 * Close rel, opened for update_open(), and what update_open() set up; the
 * updates made are visible to the rest of the call.
 */
static void
update_close(Relation rel, EState *estate, ResultRelInfo *result_rel)
{
	ExecCloseIndices(result_rel);
	FreeExecutorState(estate);
	table_close(rel, NoLock);
	CommandCounterIncrement();
}

/*
 * Replace the version of rel at tid by new, waiting for whoever holds it
 * if wait, and add its index entries as the update requires.  new may
 * point into the old version: the update copies its values into a tuple
 * of its own before it touches the page.
 */
static TM_Result
update_version(Relation rel, ItemPointer tid, TupleTableSlot *new,
			   CommandId cid, Snapshot snapshot, bool wait, EState *estate,
			   ResultRelInfo *result_rel)
{
	TM_FailureData tmfd;
	LockTupleMode lockmode;
	DlUpdateIndexes update_indexes;
	TM_Result	result;

	ExecStoreVirtualTuple(new);
	result = table_tuple_update(rel, tid, new, cid, snapshot, InvalidSnapshot,
								wait, &tmfd, &lockmode, &update_indexes);
	if (result == TM_Ok && dl_indexes_changed(update_indexes))
	{
		/* a deferred unique or exclusion check would be left to us */
		if (dl_insert_index_tuples(result_rel, new, estate,
								   update_indexes) != NIL)
			elog(ERROR, "unexpected deferred index check on \"%s\"",
				 RelationGetRelationName(rel));
		ResetPerTupleExprContext(estate);
	}
	return result;
}

/*
 * Open distlock.jobs to update the columns listed (nupdated attribute
 * numbers) with its indexes kept as an UPDATE statement would keep them.
 * Returns false, opening nothing, where the direct paths do not apply.
 */
bool
dl_jobs_open(JobsTable *jt, const AttrNumber *updated, int nupdated)
{
	const char *why;

	if (!dl_direct_path || IsolationUsesXactSnapshot())
		return false;
	jt->cat = dl_catalog();
	/* what this transaction did so far is visible to our snapshots */
	CommandCounterIncrement();
	jt->rel = table_open(jt->cat->jobs, RowExclusiveLock);
	dl_catalog_after_lock();
	why = jobs_not_plain(jt->rel, jt->cat, &jt->positions);
	if (!why)
		why = update_open(jt->rel, updated, nupdated, &jt->estate,
						  &jt->result_rel);
	if (why)
	{
		direct_declined(jt->rel, why);
		return false;
	}
	jt->old = table_slot_create(jt->rel, NULL);
	jt->locked = table_slot_create(jt->rel, NULL);
	jt->new = MakeSingleTupleTableSlot(RelationGetDescr(jt->rel),
									   &TTSOpsVirtual);
	jt->cid = GetCurrentCommandId(true);
	return true;
}

void
dl_jobs_close(JobsTable *jt)
{
	ExecDropSingleTupleTableSlot(jt->old);
	ExecDropSingleTupleTableSlot(jt->locked);
	ExecDropSingleTupleTableSlot(jt->new);
	update_close(jt->rel, jt->estate, jt->result_rel);
}

/* Start new as a copy of old, whose values it points to. */
static void
slot_copy_values(TupleTableSlot *old, TupleTableSlot *new)
{
	int			natts = old->tts_tupleDescriptor->natts;

	slot_getallattrs(old);
	ExecClearTuple(new);
	memcpy(new->tts_values, old->tts_values, natts * sizeof(Datum));
	memcpy(new->tts_isnull, old->tts_isnull, natts * sizeof(bool));
}

/* Start jt->new as a copy of jt->old, whose values it points to. */
void
dl_jobs_new_from_old(JobsTable *jt)
{
	slot_copy_values(jt->old, jt->new);
}

void
dl_jobs_set(JobsTable *jt, AttrNumber att, Datum value, bool isnull)
{
	jt->new->tts_values[att - 1] = value;
	jt->new->tts_isnull[att - 1] = isnull;
}

/*
 * A copy of the header of the version in slot as it is now, read under its
 * buffer's lock (the slot keeps the page pinned and points into it).  It is
 * judged on the copy: hint bits may change under a share lock.
 */
static void
jobs_header(TupleTableSlot *slot, HeapTupleHeaderData *copy)
{
	BufferHeapTupleTableSlot *bslot = (BufferHeapTupleTableSlot *) slot;

	Assert(TTS_IS_BUFFERTUPLE(slot) && !TTS_SHOULDFREE(slot));
	LockBuffer(bslot->buffer, BUFFER_LOCK_SHARE);
	memcpy(copy, bslot->base.tuple->t_data, SizeofHeapTupleHeader);
	LockBuffer(bslot->buffer, BUFFER_LOCK_UNLOCK);
}

/*
 * The transaction that updated or deleted the version whose header is
 * hdr, from its xmax (a multixact's updating member), or
 * InvalidTransactionId if only lockers, or nobody, set it.
 */
static TransactionId
jobs_updater(HeapTupleHeader hdr)
{
	if ((hdr->t_infomask & HEAP_XMAX_INVALID) ||
		HEAP_XMAX_IS_LOCKED_ONLY(hdr->t_infomask))
		return InvalidTransactionId;
	return HeapTupleHeaderGetUpdateXid(hdr);
}

/*
 * Lock the version in jt->old FOR UPDATE, unless another transaction holds
 * or is changing it or it is no longer the latest version, in which case
 * return at once (SKIP LOCKED's rule; see the header comment): DL_LOCKED,
 * or why not.  DL_LOCK_HELD means another transaction holds the version
 * with a lock and nothing more (SELECT ... FOR UPDATE), and so may leave
 * it as it is; DL_LOCK_CHANGED that a transaction has changed it or is
 * changing it (claim positions, position.c, tell the two apart).
 *
 * Concurrent claims meet each other's versions at every step.  For such a
 * version heap_lock_tuple() takes the page's lock exclusively, a
 * heavyweight lock on the tuple and a try for the holder's transaction
 * lock, only to refuse it; so first look, under a share lock, for what it
 * would find: a running transaction other than ours as xmax, which any
 * lock FOR UPDATE conflicts with.  jt->old comes from an MVCC scan at
 * jt->cid, so HeapTupleSatisfiesUpdate() would get past xmin to that same
 * test of xmax, and a transaction leaves the proc array before it lets go
 * of its xid's lock, so ConditionalXactLockTableWait() would fail too:
 * what the look refuses, heap_lock_tuple() would have refused at that
 * moment.  A multixact, this transaction's own xmax and one that has ended
 * are left to it.
 */
DlLockResult
dl_jobs_lock_or_skip(JobsTable *jt, Snapshot snapshot)
{
	TM_FailureData tmfd;
	TM_Result	result;
	HeapTupleHeaderData hdr;
	TransactionId xmax;
	uint16		infomask;

	jobs_header(jt->old, &hdr);
	infomask = hdr.t_infomask;
	xmax = HeapTupleHeaderGetRawXmax(&hdr);
	if (!(infomask & (HEAP_XMAX_INVALID | HEAP_XMAX_COMMITTED |
					  HEAP_XMAX_IS_MULTI)) &&
		TransactionIdIsNormal(xmax) &&
		!TransactionIdIsCurrentTransactionId(xmax) &&
		TransactionIdIsInProgress(xmax))
		return HEAP_XMAX_IS_LOCKED_ONLY(infomask) ?
			DL_LOCK_HELD : DL_LOCK_CHANGED;

	result = table_tuple_lock(jt->rel, &jt->old->tts_tid, snapshot,
							  jt->locked, jt->cid, LockTupleExclusive,
							  LockWaitSkip, 0, &tmfd);
	if (result == TM_Ok)
		return DL_LOCKED;
	if (result != TM_WouldBlock)
		return DL_LOCK_CHANGED;

	/*
	 * In the way: an updater, or lockers only?  An updater that rolled back
	 * counts as none: inside a multixact with lockers still running it stays
	 * in the header, and it may have rolled back (lowering the position)
	 * before this claim read the position's generation.
	 */
	jobs_header(jt->old, &hdr);
	xmax = jobs_updater(&hdr);
	if (TransactionIdIsValid(xmax) &&
		(TransactionIdIsInProgress(xmax) || TransactionIdDidCommit(xmax)))
		return DL_LOCK_CHANGED;
	return DL_LOCK_HELD;
}

/*
 * Replace the version in jt->old by jt->new, waiting for whoever holds it
 * if wait, and add its index entries.
 */
TM_Result
dl_jobs_update(JobsTable *jt, Snapshot snapshot, bool wait)
{
	return update_version(jt->rel, &jt->old->tts_tid, jt->new, jt->cid,
						  snapshot, wait, jt->estate, jt->result_rel);
}

/*
 * Delete the version in jt->old, waiting for whoever holds it if wait.  A
 * deletion adds no index entries (vacuum removes the version's), and the
 * only trigger that could fire, jobs_unpending, notes pending versions
 * only: the direct paths delete running ones.
 */
TM_Result
dl_jobs_delete(JobsTable *jt, Snapshot snapshot, bool wait)
{
	TM_FailureData tmfd;

	CheckCmdReplicaIdentity(jt->rel, CMD_DELETE);
	return table_tuple_delete(jt->rel, &jt->old->tts_tid, jt->cid, snapshot,
							  InvalidSnapshot, wait, &tmfd, false);
}

/*
 * Begin a scan of index (of table heap) under snapshot for the entries
 * whose first column compares to value by strategy (proc: its operator's
 * function).
 */
IndexScanDesc
dl_index_scan(Relation heap, Relation index, Snapshot snapshot,
			StrategyNumber strategy, RegProcedure proc, Datum value)
{
	ScanKeyData key;
	IndexScanDesc scan;

	ScanKeyEntryInitialize(&key, 0, 1, strategy, InvalidOid,
						   index->rd_indcollation[0], proc, value);
	scan = dl_index_beginscan(heap, index, snapshot, 1, 0);
	index_rescan(scan, &key, 1, NULL, 0);
	return scan;
}

/*
 * Begin a scan of index (of distlock.jobs) for column 1 = value, under a
 * new snapshot that sees what the transaction has done so far.
 */
IndexScanDesc
dl_jobs_scan(JobsTable *jt, Relation index, RegProcedure eq, Datum value)
{
	return dl_index_scan(jt->rel, index, RegisterSnapshot(GetLatestSnapshot()),
					   BTEqualStrategyNumber, eq, value);
}

/*
 * Set keys[0] and [1] to find, in jobs_claim_idx, the jobs of owner's queue
 * and key [2] to compare the priority to priority by strategy (proc).
 */
static void
claim_keys(Relation index, ScanKey keys, Oid owner, Datum queue,
		   StrategyNumber strategy, RegProcedure proc, int32 priority)
{
	ScanKeyEntryInitialize(&keys[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
						   index->rd_indcollation[0], F_OIDEQ,
						   ObjectIdGetDatum(owner));
	ScanKeyEntryInitialize(&keys[1], 0, 2, BTEqualStrategyNumber, InvalidOid,
						   index->rd_indcollation[1], F_TEXTEQ, queue);
	ScanKeyEntryInitialize(&keys[2], 0, 3, strategy, InvalidOid,
						   index->rd_indcollation[2], proc,
						   Int32GetDatum(priority));
}

/*
 * Begin a scan of jobs_claim_idx for the jobs of owner's queue, as
 * dl_jobs_scan() does; or, with priority, for its jobs of that priority
 * from the key *from on (NULL: all), reading each entry's key for
 * dl_jobs_next().
 */
IndexScanDesc
dl_jobs_scan_queue(JobsTable *jt, Relation index, Oid owner, Datum queue,
				   const int32 *priority, const DlJobPos *from)
{
	ScanKeyData keys[4];
	ScanKeyData *row;
	int			nkeys = priority ? 3 : 2;
	IndexScanDesc scan;

	claim_keys(index, keys, owner, queue, BTEqualStrategyNumber, F_INT4EQ,
			   priority ? *priority : 0);
	if (priority && from)
	{
		/*
		 * ROW(run_at, id) >= ROW(from->run_at, from->id), as nbtree takes it.
		 * The scan keeps pointing to the members: they live as long as the
		 * call's memory.
		 */
		row = palloc(2 * sizeof(ScanKeyData));
		ScanKeyEntryInitialize(&row[0], SK_ROW_MEMBER, 4,
							   BTGreaterEqualStrategyNumber, InvalidOid,
							   index->rd_indcollation[3], F_TIMESTAMPTZ_CMP,
							   TimestampTzGetDatum(from->run_at));
		ScanKeyEntryInitialize(&row[1], SK_ROW_MEMBER | SK_ROW_END, 5,
							   BTGreaterEqualStrategyNumber, InvalidOid,
							   index->rd_indcollation[4], F_BTINT8CMP,
							   Int64GetDatum(from->id));
		MemSet(&keys[nkeys], 0, sizeof(ScanKeyData));
		keys[nkeys].sk_flags = SK_ROW_HEADER;
		keys[nkeys].sk_attno = 4;
		keys[nkeys].sk_strategy = BTGreaterEqualStrategyNumber;
		keys[nkeys].sk_argument = PointerGetDatum(row);
		nkeys++;
	}
	scan = dl_index_beginscan(jt->rel, index,
							  RegisterSnapshot(GetLatestSnapshot()), nkeys, 0);
	scan->xs_want_itup = priority != NULL;
	index_rescan(scan, keys, nkeys, NULL, 0);
	return scan;
}

/*
 * The next job of a scan of dl_jobs_scan_queue() that its snapshot sees,
 * into slot; false at the end.  With priority, *walked is the key of the
 * last entry read, whether or not its job was seen.
 */
bool
dl_jobs_next(IndexScanDesc scan, TupleTableSlot *slot, DlJobPos *walked)
{
	for (;;)
	{
		if (!scan->xs_heap_continue)
		{
			bool		isnull;

			if (index_getnext_tid(scan, ForwardScanDirection) == NULL)
				return false;
			if (scan->xs_want_itup)
			{
				walked->run_at = DatumGetTimestampTz(index_getattr(scan->xs_itup, 4,
																   scan->xs_itupdesc,
																   &isnull));
				walked->id = DatumGetInt64(index_getattr(scan->xs_itup, 5,
														 scan->xs_itupdesc,
														 &isnull));
			}
		}
		if (index_fetch_heap(scan, slot))
			return true;
	}
}

/*
 * The priority of the first group of owner's queue in jobs_claim_idx, or
 * with after of the first after prev in claim order (a lower priority),
 * into *priority; false if there is none.  Only the index is read: the
 * entry found may be of a version nobody can see any more, and then the
 * group may have no job at all.  Entries known dead (killed) are read
 * too, rather than stepped over: they have the key all the same.
 */
bool
dl_jobs_next_group(JobsTable *jt, Relation index, Oid owner, Datum queue,
				   bool after, int32 prev, int32 *priority)
{
	ScanKeyData keys[3];
	int			nkeys = after ? 3 : 2;
	IndexScanDesc scan;
	bool		found;

	claim_keys(index, keys, owner, queue, BTLessStrategyNumber, F_INT4LT,
			   prev);
	scan = dl_index_beginscan(jt->rel, index, SnapshotAny, nkeys, 0);
	scan->xs_want_itup = true;
	scan->ignore_killed_tuples = false;
	index_rescan(scan, keys, nkeys, NULL, 0);
	found = index_getnext_tid(scan, ForwardScanDirection) != NULL;
	if (found)
	{
		bool		isnull;

		*priority = DatumGetInt32(index_getattr(scan->xs_itup, 3,
												scan->xs_itupdesc, &isnull));
	}
	index_endscan(scan);
	return found;
}

void
dl_jobs_scan_end(IndexScanDesc scan)
{
	Snapshot	snapshot = scan->xs_snapshot;

	index_endscan(scan);
	UnregisterSnapshot(snapshot);
}

/* Open table relid in lockmode for reads under snapshot (NULL: a new one). */
static void
latest_open(LatestRead *lr, Oid relid, LOCKMODE lockmode, Snapshot snapshot)
{
	lr->rel = table_open(relid, lockmode);
	dl_catalog_after_lock();
	lr->slot = table_slot_create(lr->rel, NULL);
	/* a new one is taken once the table is locked, as a statement's is */
	lr->snapshot = RegisterSnapshot(snapshot ? snapshot : GetLatestSnapshot());
	lr->index = NULL;
	lr->scan = NULL;
}

/*
 * Open table relid in lockmode for reads as committed now: under one new
 * snapshot, taken after a CommandCounterIncrement so that what earlier
 * commands of this statement did is visible too (a close before a claim in
 * one SELECT).
 */
void
dl_latest_open(LatestRead *lr, Oid relid, LOCKMODE lockmode)
{
	CommandCounterIncrement();
	latest_open(lr, relid, lockmode, NULL);
}

/*
 * dl_latest_open() under the snapshot of another read still open, so that
 * the two tables are read as of one instant, as a join reads them.  The
 * snapshot is older than the lock on relid, which is only a share lock
 * against what the table's owner might run (a TRUNCATE committed in
 * between would hide rows that were there; callers take a missing row as
 * a reason to look again, on a new snapshot).
 */
void
dl_latest_open_as(LatestRead *lr, Oid relid, LOCKMODE lockmode,
				  const LatestRead *other)
{
	latest_open(lr, relid, lockmode, other->snapshot);
}

static void
latest_scan_end(LatestRead *lr)
{
	if (lr->scan == NULL)
		return;
	index_endscan(lr->scan);
	index_close(lr->index, NoLock);
	lr->scan = NULL;
	lr->index = NULL;
}

/*
 * Begin a scan of index indexid for the entries whose first column
 * compares to value by strategy (proc: its operator's function), ending
 * the scan before it.
 */
void
dl_latest_scan(LatestRead *lr, Oid indexid, StrategyNumber strategy,
			   RegProcedure proc, Datum value)
{
	latest_scan_end(lr);
	lr->index = index_open(indexid, AccessShareLock);
	lr->scan = dl_index_scan(lr->rel, lr->index, lr->snapshot, strategy, proc,
							 value);
}

/* The next row of the scan, into lr->slot; false when there is none. */
bool
dl_latest_next(LatestRead *lr)
{
	return index_getnext_slot(lr->scan, ForwardScanDirection, lr->slot);
}

void
dl_latest_close(LatestRead *lr)
{
	latest_scan_end(lr);
	UnregisterSnapshot(lr->snapshot);
	ExecDropSingleTupleTableSlot(lr->slot);
	table_close(lr->rel, NoLock);
}

/*
 * Fetch into slot, under snapshot, the version of a row of rel at tid
 * that a statement read (as latest committed) with raw xmin xmin: false if
 * it is not there any more.  The statement's buffer pins are gone, so the
 * page may have been pruned since and the line pointer reused: the fetch
 * checks that it still holds a tuple the snapshot sees, and xmin that it
 * is the one read (a tuple put there later has another: the transaction
 * that wrote the version read had committed before the read).  The slot
 * keeps the page pinned, so it is not pruned while the caller goes on.
 */
static bool
version_fetch(Relation rel, Snapshot snapshot, TupleTableSlot *slot,
			  ItemPointer tid, TransactionId xmin)
{
	bool		should_free;
	HeapTuple	tuple;
	bool		same;

	if (!table_tuple_fetch_row_version(rel, tid, snapshot, slot))
		return false;
	tuple = ExecFetchSlotHeapTuple(slot, false, &should_free);
	same = TransactionIdEquals(HeapTupleHeaderGetRawXmin(tuple->t_data), xmin);
	if (should_free)
		heap_freetuple(tuple);
	return same;
}

/*
 * At REPEATABLE READ and SERIALIZABLE, raise 40001 unless the version of
 * relid at tid with raw xmin xmin, read as latest committed, is the one the
 * transaction's snapshot sees: a decision on a version the snapshot cannot
 * see would act on what the transaction did not read, where a row lock
 * would have failed the transaction (and, at SERIALIZABLE, the fetch under
 * the transaction's snapshot records the read for the conflict checks).
 */
void
dl_version_check_visible(Oid relid, ItemPointer tid, TransactionId xmin)
{
	Relation	rel;
	TupleTableSlot *slot;
	bool		visible;

	if (!IsolationUsesXactSnapshot())
		return;
	rel = table_open(relid, AccessShareLock);
	slot = table_slot_create(rel, NULL);
	visible = version_fetch(rel, GetTransactionSnapshot(), slot, tid, xmin);
	ExecDropSingleTupleTableSlot(slot);
	table_close(rel, NoLock);
	if (!visible)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not serialize access due to concurrent update")));
}

/*
 * Lock the version of relid at tid with raw xmin xmin, which a statement
 * read as latest committed, in mode, waiting for any transaction that holds
 * it in a conflicting mode or is changing it.  The lock is asked for that
 * version only, as at REPEATABLE READ: should it have been updated or
 * deleted meanwhile, return false, locking nothing.  FOR UPDATE at READ
 * COMMITTED would instead lock the latest version and only then test it,
 * keeping the lock when the test fails; a caller that judged a version
 * before locking it reads the row again instead, and so never keeps a lock
 * on a row it has not judged (lease.c).
 *
 * A key share lock does not conflict with an update that leaves the key
 * alone, so heap_lock_tuple() grants it without waiting on a version whose
 * update is in progress, or has committed (as for a foreign key's check):
 * only a version no committed update has replaced counts as unchanged, so
 * the call may return false having locked the version (fence() then reads
 * the row again and locks its latest version, or raises, which undoes the
 * lock).
 */
bool
dl_version_lock(Oid relid, ItemPointer tid, TransactionId xmin,
				LockTupleMode mode)
{
	LatestRead	lr;
	TM_Result	result = TM_Updated;

	dl_latest_open(&lr, relid, RowShareLock);
	if (version_fetch(lr.rel, lr.snapshot, lr.slot, tid, xmin))
	{
		TupleTableSlot *locked = table_slot_create(lr.rel, NULL);
		TM_FailureData tmfd;

		result = table_tuple_lock(lr.rel, tid, lr.snapshot, locked,
								  GetCurrentCommandId(true), mode,
								  LockWaitBlock, 0, &tmfd);
		if (result == TM_Ok && mode == LockTupleKeyShare)
		{
			Snapshot	latest = RegisterSnapshot(GetLatestSnapshot());

			if (!version_fetch(lr.rel, latest, locked, tid, xmin))
				result = TM_Updated;
			UnregisterSnapshot(latest);
		}
		ExecDropSingleTupleTableSlot(locked);
	}
	dl_latest_close(&lr);
	switch (result)
	{
		case TM_Ok:
			return true;
		case TM_Updated:
		case TM_Deleted:
			return false;
		default:
			/* read as committed, so neither ours in this command nor unseen */
			elog(ERROR, "unexpected result %d locking a row of distlock",
				 (int) result);
	}
	return false;				/* keep compiler quiet */
}

/*
 * Begin rewriting the version of relid at tid that this transaction has
 * locked (dl_version_lock()), in place of an UPDATE ... WHERE ctid = $1
 * that sets the columns listed (updated), some of them perhaps to NULL
 * (nullable): ru->old holds the version, ru->new starts as a copy of it
 * for dl_row_update_set().  Returns false, opening nothing, where the SQL
 * statement must run instead: at REPEATABLE READ and SERIALIZABLE (the
 * statement's snapshot checks), with distlock.direct_path off, and when
 * the table has a trigger, a NOT NULL on a nullable column, or anything
 * else only the executor applies (table_not_plain(), update_open()).
 */
bool
dl_row_update_begin(RowUpdate *ru, Oid relid, ItemPointer tid,
					const AttrNumber *updated, int nupdated,
					const AttrNumber *nullable, int nnullable)
{
	const char *why;

	if (!dl_direct_path || IsolationUsesXactSnapshot())
		return false;
	/* what this transaction did so far is visible to our snapshot */
	CommandCounterIncrement();
	ru->rel = table_open(relid, RowExclusiveLock);
	if (ru->rel->trigdesc != NULL)
		why = trigger_reason(&ru->rel->trigdesc->triggers[0]);
	else
		why = table_not_plain(ru->rel);
	/* a NOT NULL the owner added where we may write NULL: ExecUpdate's */
	if (!why)
		why = not_null_column(ru->rel, nullable, nnullable);
	if (!why)
		why = update_open(ru->rel, updated, nupdated, &ru->estate,
						  &ru->result_rel);
	if (why)
	{
		direct_declined(ru->rel, why);
		return false;
	}
	ru->snapshot = RegisterSnapshot(GetLatestSnapshot());
	ru->old = table_slot_create(ru->rel, NULL);
	/* locked by us, so still the latest version, and visible */
	if (!table_tuple_fetch_row_version(ru->rel, tid, ru->snapshot, ru->old))
		elog(ERROR, "locked row of \"%s\" not found",
			 RelationGetRelationName(ru->rel));
	ru->new = MakeSingleTupleTableSlot(RelationGetDescr(ru->rel),
									   &TTSOpsVirtual);
	slot_copy_values(ru->old, ru->new);
	return true;
}

void
dl_row_update_set(RowUpdate *ru, AttrNumber att, Datum value, bool isnull)
{
	ru->new->tts_values[att - 1] = value;
	ru->new->tts_isnull[att - 1] = isnull;
}

/*
 * Write ru->new in place of ru->old, which nobody else can have changed
 * since we locked it, and close what dl_row_update_begin() opened.
 */
void
dl_row_update_end(RowUpdate *ru)
{
	TM_Result	result;

	/*
	 * wait: heap_update() finds our own lock in the way (TM_BeingModified)
	 * and goes ahead only when it may wait; nobody else holds the version in
	 * a mode that conflicts with ours (a fence's key share lock does not:
	 * lease.c), so it never does.
	 */
	result = update_version(ru->rel, &ru->old->tts_tid, ru->new,
							GetCurrentCommandId(true), ru->snapshot, true,
							ru->estate, ru->result_rel);
	if (result != TM_Ok)
		elog(ERROR, "unexpected result %d updating a locked row of \"%s\"",
			 (int) result, RelationGetRelationName(ru->rel));
	ExecDropSingleTupleTableSlot(ru->old);
	ExecDropSingleTupleTableSlot(ru->new);
	UnregisterSnapshot(ru->snapshot);
	update_close(ru->rel, ru->estate, ru->result_rel);
}
