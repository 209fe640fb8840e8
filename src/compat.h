/*-------------------------------------------------------------------------
 *
 * compat.h
 *		What differs between the PostgreSQL major versions distlock builds
 *		against (15 to 18), in one place.
 *
 * Each difference is a PG_VERSION_NUM guard around a macro or a static
 * inline function with one signature for every version; the rest of the
 * code calls only these.
 *
 *	- 16: table_tuple_update() reports which indexes need new entries as
 *	  TU_UpdateIndexes rather than a bool, and ExecInsertIndexTuples() takes
 *	  onlySummarizing; the columns an UPDATE changes moved from the range
 *	  table entry to its RTEPermissionInfo; ownership checks are
 *	  object_ownercheck(); stringToQualifiedNameList() takes an error
 *	  context.
 *	- 17: LockHeldByMe() can also accept a stronger mode; a backend's
 *	  PGPROC number is MyProcNumber; the DSM registry gives shared memory
 *	  to a library that was not preloaded.
 *	- 18: ExecInitRangeTable() takes the unpruned relations, and
 *	  index_beginscan() an instrumentation struct; tables may have virtual
 *	  generated columns.
 *	- Minor releases of 2025 (all majors): the byte of WalSndCtlData that
 *	  says whether synchronous standbys are defined became flags, which
 *	  also say whether the checkpointer has read synchronous_standby_names.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/compat.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef DISTLOCK_COMPAT_H
#define DISTLOCK_COMPAT_H

#include "access/genam.h"
#include "access/tableam.h"
#include "executor/executor.h"
#include "nodes/bitmapset.h"
#include "nodes/makefuncs.h"
#include "nodes/parsenodes.h"
#include "catalog/pg_database.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/regproc.h"
#include "storage/proc.h"
#if PG_VERSION_NUM >= 170000
#include "storage/dsm_registry.h"
#endif
#include "utils/acl.h"

/* What table_tuple_update() says about the indexes. */
#if PG_VERSION_NUM >= 160000
typedef TU_UpdateIndexes DlUpdateIndexes;
#define dl_indexes_changed(u)	((u) != TU_None)
#define dl_insert_index_tuples(rri, slot, estate, u) \
	ExecInsertIndexTuples((rri), (slot), (estate), true, false, NULL, NIL, \
						  (u) == TU_Summarizing)
#else
typedef bool DlUpdateIndexes;
#define dl_indexes_changed(u)	(u)
#define dl_insert_index_tuples(rri, slot, estate, u) \
	ExecInsertIndexTuples((rri), (slot), (estate), true, false, NULL, NIL)
#endif

/*
 * Set up estate's range table as that of an UPDATE of the relation of rte
 * (entry 1) that changes the columns in updated (offsets by
 * FirstLowInvalidHeapAttributeNumber, as the executor keeps them).
 */
static inline void
dl_init_update_range_table(EState *estate, RangeTblEntry *rte,
						   Bitmapset *updated)
{
#if PG_VERSION_NUM >= 160000
	RTEPermissionInfo *perminfo = makeNode(RTEPermissionInfo);

	perminfo->relid = rte->relid;
	perminfo->inh = false;
	perminfo->requiredPerms = ACL_UPDATE;
	perminfo->updatedCols = updated;
	rte->perminfoindex = 1;
#if PG_VERSION_NUM >= 180000
	ExecInitRangeTable(estate, list_make1(rte), list_make1(perminfo),
					   bms_make_singleton(1));
#else
	ExecInitRangeTable(estate, list_make1(rte), list_make1(perminfo));
#endif
#else
	rte->updatedCols = updated;
	ExecInitRangeTable(estate, list_make1(rte));
#endif
}

/* Whether a table has virtual generated columns (18 has them). */
#if PG_VERSION_NUM >= 180000
#define dl_has_generated_virtual(constr)	((constr)->has_generated_virtual)
#else
#define dl_has_generated_virtual(constr)	false
#endif

/* index_beginscan() without instrumentation. */
#if PG_VERSION_NUM >= 180000
#define dl_index_beginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), NULL, (nkeys), (norderbys))
#else
#define dl_index_beginscan(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), (nkeys), (norderbys))
#endif

/* Whether this backend holds the lock in exactly mode. */
#if PG_VERSION_NUM >= 170000
#define dl_lock_held_by_me(tag, mode)	LockHeldByMe((tag), (mode), false)
#else
#define dl_lock_held_by_me(tag, mode)	LockHeldByMe((tag), (mode))
#endif

/* A possibly qualified name's parts (errors are thrown, not soft). */
#if PG_VERSION_NUM >= 160000
#define dl_qualified_name_list(str)	stringToQualifiedNameList((str), NULL)
#else
#define dl_qualified_name_list(str)	stringToQualifiedNameList(str)
#endif

/* Whether the current user is a superuser or owns database dbid. */
#if PG_VERSION_NUM >= 160000
#define dl_database_owner(dbid) \
	(superuser() || object_ownercheck(DatabaseRelationId, (dbid), GetUserId()))
#else
#define dl_database_owner(dbid) \
	(superuser() || pg_database_ownercheck((dbid), GetUserId()))
#endif

/*
 * This backend's PGPROC number; and shared memory named name of size bytes,
 * made by init on first use, where the DSM registry can give it (leaves
 * *ptr as it is otherwise).  Without preloading, a backend started after a
 * new version's library was installed loads it while older backends keep
 * the old one: the size is part of the registry's name, so that a library
 * whose layout differs gets a segment of its own instead of reading
 * another's as its own.  A change of layout that keeps a region's size
 * must change its name too.
 */
#if PG_VERSION_NUM >= 170000
#define dl_my_procno()	((int) MyProcNumber)
static inline void
dl_attach_named_segment(void **ptr, const char *name, Size size,
						void (*init) (void *))
{
	char		key[NAMEDATALEN];
	bool		found;

	if (*ptr != NULL)
		return;
	snprintf(key, sizeof(key), "%s (%zu bytes)", name, size);
	*ptr = GetNamedDSMSegment(key, size, init, &found);
}
#else
#define dl_my_procno()	(MyProc->pgprocno)
static inline void
dl_attach_named_segment(void **ptr, const char *name, Size size,
						void (*init) (void *))
{
}
#endif

/*
 * The byte of WalSndCtlData that says whether synchronous standbys are
 * defined (see beat_row_durable()).
 */
#ifdef SYNC_STANDBY_INIT
#define DL_SYNC_STANDBYS_BYTE	sync_standbys_status
#else
#define DL_SYNC_STANDBYS_BYTE	sync_standbys_defined
#endif

#endif							/* DISTLOCK_COMPAT_H */
