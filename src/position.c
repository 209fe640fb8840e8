/*-------------------------------------------------------------------------
 *
 * position.c
 *		Where a claim may start: a position per queue and priority, kept in
 *		shared memory, before which no job can be claimed.
 *
 * A claim walks jobs_claim_idx in claim order (priority DESC, run_at, id).
 * A claim updates its job out of that index's predicate, and the entry of
 * the pending version stays behind until vacuum removes it; while anything
 * holds the vacuum horizon back it cannot, and a claim that walked from
 * the start of its queue would step over every job claimed since (a
 * minute of them: hundreds of thousands).  So the claim of a queue's
 * priority group starts at the group's position: the key (run_at, id) of
 * the first entry that the last claims could not rule out.
 *
 * The argument that no claimable job is ever skipped.  Say a position P of
 * a group is sound when every entry before P is of a version that is not
 * pending and claimable now, nor will be without a later commit that makes
 * a version pending (an enqueue, a failed attempt or a reaped session
 * handing a job back, reassign_owned() moving jobs, an administrator's
 * UPDATE of run_at, a restore).  Every statement that writes a pending
 * version fires the trigger jobs_pending (below), which notes it; the
 * commit, once visible to others (XACT_EVENT_COMMIT comes after
 * ProcArrayEndTransaction), lowers the position of the version's group to
 * at most its key and bumps the bucket's generation, remembering the key
 * in a ring.  A claim reads
 * the position and the generation g before it takes the snapshot it scans
 * with, and moves the position only to the key S of the first entry it
 * could not rule out:
 *
 *	- a job it claimed itself (its transaction may yet roll back),
 *	- a job it could not lock (another transaction holds or changed it, and
 *	  may roll back, or may be a claim in flight),
 *	- a job not yet due (it becomes claimable without any commit; every
 *	  later entry of the group is later still, so the walk ends there).
 *
 * Every entry it passed before S was either one it read and found not
 * pending, or invisible to its snapshot: of a version deleted or updated
 * by a committed transaction (claimed, finished: it stays so), or written
 * by one that had not committed when the snapshot was taken.  Had that one
 * committed before the generation was read, the snapshot would see it; so
 * its commit lowers the position afterwards, with a generation above g.
 * When the claim sets the position, it takes the lowest key of those
 * lowerings after g from the ring, and sets the position to the smaller of
 * S and that key (nothing, if more lowerings came than the ring keeps),
 * unless the position is already further on (another claim's sound
 * position; the greater of two sound positions is sound).  A rolled-back
 * claim or cancel leaves its rows as they were, at or after the position
 * every walk stopped at.  So a position is sound whenever it is read.
 *
 * A claim uses the positions only while jobs_pending is the table's one
 * trigger and fires always (in replication and restores too), so only a
 * superuser can write pending versions unnoted: by disabling it (claims
 * then walk from each group's start), writing, and enabling it again;
 * what was written meanwhile is claimed once the positions are gone (a
 * server restart).  A transaction that made jobs pending cannot be
 * prepared (PREPARE TRANSACTION raises 0A000, as it does after LISTEN):
 * its commit would come from another backend, perhaps after the restart
 * that took the positions, and lower nothing.
 *
 * The positions are a cache: buckets by a hash of (database, jobs table,
 * owner, queue, priority), one position each, taken over by another key on
 * a collision; a group without one (a new group, a collision, a queue name
 * longer than DL_POSITION_NAME_MAX bytes, no shared memory) is walked from
 * its start, as always.  A lowering applies to its bucket whoever holds
 * it, which only ever lowers a position.  The shared memory comes as the
 * waiters' does (wake.c): shared_preload_libraries, or the DSM registry on
 * PostgreSQL 17 and later.  Each bucket has a spinlock, held for a few
 * comparisons.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/position.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "compat.h"
#include "distlock.h"

PG_FUNCTION_INFO_V1(distlock_jobs_pending);

#define POSITION_BUCKETS	4096
#define POSITION_RING		16

typedef struct PositionBucket
{
	slock_t		mutex;
	bool		used;			/* key and mark hold a position */
	DlPositionKey key;
	DlJobPos	mark;
	uint64		gen;			/* lowerings so far */
	DlJobPos	ring[POSITION_RING];	/* key of lowering gen, at gen % RING */
} PositionBucket;

/* A lowering this transaction makes at commit: bucket and lowest key. */
typedef struct PositionNote
{
	uint32		bucket;
	DlJobPos	pos;
} PositionNote;

static PositionBucket *positions = NULL;
static bool position_attach_tried = false;
static bool position_callback_registered = false;
static HTAB *position_notes = NULL;	/* in TopTransactionContext */

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static Size
positions_size(void)
{
	return mul_size(POSITION_BUCKETS, sizeof(PositionBucket));
}

static void
positions_init(void *ptr)
{
	PositionBucket *b = (PositionBucket *) ptr;

	memset(b, 0, positions_size());
	for (int i = 0; i < POSITION_BUCKETS; i++)
		SpinLockInit(&b[i].mutex);
}

static void
position_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(positions_size());
}

static void
position_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	positions = ShmemInitStruct("distlock positions", positions_size(),
								&found);
	if (!found)
		positions_init(positions);
	LWLockRelease(AddinShmemInitLock);
}

/* From _PG_init() while shared_preload_libraries are loaded. */
void
dl_position_preload(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = position_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = position_shmem_startup;
}

static bool
positions_available(void)
{
	if (!position_attach_tried)
	{
		position_attach_tried = true;
		dl_attach_named_segment((void **) &positions, "distlock positions",
								positions_size(), positions_init);
	}
	return positions != NULL;
}

int
dl_jobpos_cmp(const DlJobPos *a, const DlJobPos *b)
{
	if (a->run_at != b->run_at)
		return a->run_at < b->run_at ? -1 : 1;
	if (a->id != b->id)
		return a->id < b->id ? -1 : 1;
	return 0;
}

/*
 * The key of owner's queue's priority group, and its bucket; false if the
 * group can have no position.
 */
static bool
position_key(Oid owner, Datum queue, int32 priority, DlPositionKey *key,
			 uint32 *bucket)
{
	text	   *t = DatumGetTextPP(queue);
	int			len = VARSIZE_ANY_EXHDR(t);

	if (len > DL_POSITION_NAME_MAX || !positions_available())
		return false;
	memset(key, 0, sizeof(DlPositionKey));
	key->dbid = MyDatabaseId;
	key->relid = dl_catalog()->jobs;
	key->owner = owner;
	key->priority = priority;
	key->len = len;
	memcpy(key->name, VARDATA_ANY(t), len);
	*bucket = hash_bytes((const unsigned char *) key, sizeof(DlPositionKey)) %
		POSITION_BUCKETS;
	return true;
}

/* No position: a walk from the group's start that sets none. */
void
dl_position_none(DlPositionRead *pr)
{
	pr->mark.run_at = DT_NOBEGIN;
	pr->mark.id = PG_INT64_MIN;
	pr->bucket = -1;
}

/*
 * Where a claim of owner's queue's priority group starts, into pr->mark
 * (the group's start if it has no position).  Call before taking the
 * snapshot the group is scanned with.
 */
void
dl_position_read(Oid owner, Datum queue, int32 priority, DlPositionRead *pr)
{
	PositionBucket *b;
	uint32		bucket;

	dl_position_none(pr);
	if (!position_key(owner, queue, priority, &pr->key, &bucket))
		return;
	pr->bucket = bucket;
	b = &positions[bucket];
	SpinLockAcquire(&b->mutex);
	pr->gen = b->gen;
	if (b->used && memcmp(&b->key, &pr->key, sizeof(DlPositionKey)) == 0)
		pr->mark = b->mark;
	SpinLockRelease(&b->mutex);
}

/*
 * A claim that read pr found nothing before stop that it could not rule
 * out (see the header comment): move the position on to stop, or to the
 * lowest key lowered since pr was read if that is lower.
 */
void
dl_position_advance(const DlPositionRead *pr, DlJobPos stop)
{
	PositionBucket *b;

	if (pr->bucket < 0 || dl_jobpos_cmp(&stop, &pr->mark) <= 0)
		return;
	b = &positions[pr->bucket];
	SpinLockAcquire(&b->mutex);
	if (b->gen - pr->gen > POSITION_RING)
	{
		SpinLockRelease(&b->mutex);
		return;
	}
	for (uint64 g = pr->gen + 1; g <= b->gen; g++)
	{
		DlJobPos   *low = &b->ring[g % POSITION_RING];

		if (dl_jobpos_cmp(low, &stop) < 0)
			stop = *low;
	}
	if (!b->used || memcmp(&b->key, &pr->key, sizeof(DlPositionKey)) != 0)
	{
		/* take the bucket over: no position is the same as the start */
		b->key = pr->key;
		b->mark = stop;
		b->used = true;
	}
	else if (dl_jobpos_cmp(&stop, &b->mark) > 0)
		b->mark = stop;
	SpinLockRelease(&b->mutex);
}

static void
position_xact_callback(XactEvent event, void *arg)
{
	HASH_SEQ_STATUS seq;
	PositionNote *note;

	if (position_notes == NULL)
		return;
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot PREPARE a transaction that made distlock jobs pending")));
			break;
		case XACT_EVENT_COMMIT:
			/* visible to others now: lower the positions before them */
			hash_seq_init(&seq, position_notes);
			while ((note = hash_seq_search(&seq)) != NULL)
			{
				PositionBucket *b = &positions[note->bucket];

				SpinLockAcquire(&b->mutex);
				b->gen++;
				b->ring[b->gen % POSITION_RING] = note->pos;
				if (b->used && dl_jobpos_cmp(&note->pos, &b->mark) < 0)
					b->mark = note->pos;
				SpinLockRelease(&b->mutex);
			}
			position_notes = NULL;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			position_notes = NULL;	/* its memory goes with the transaction */
			break;
		default:
			break;
	}
}

/*
 * This transaction makes a version of a job of owner's queue pending, at
 * priority and key pos: once it commits, no position of the group may be
 * beyond pos.  (A subtransaction that aborts leaves the note: one lowering
 * too many only costs a walk.)
 */
static void
position_note(Oid owner, Datum queue, int32 priority, DlJobPos pos)
{
	DlPositionKey key;
	uint32		bucket;
	PositionNote *note;
	bool		found;

	if (!position_key(owner, queue, priority, &key, &bucket))
		return;
	if (!position_callback_registered)
	{
		RegisterXactCallback(position_xact_callback, NULL);
		position_callback_registered = true;
	}
	if (position_notes == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(uint32);
		ctl.entrysize = sizeof(PositionNote);
		ctl.hcxt = TopTransactionContext;
		position_notes = hash_create("distlock position notes", 16, &ctl,
									 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	note = hash_search(position_notes, &bucket, HASH_ENTER, &found);
	if (!found || dl_jobpos_cmp(&pos, &note->pos) < 0)
		note->pos = pos;
}

/*
 * The trigger jobs_pending: AFTER INSERT OR UPDATE ON distlock.jobs FOR
 * EACH ROW WHEN (NEW.status = 'pending'), enabled ALWAYS (so also in
 * replication and restores).  Every version made pending by a statement,
 * distlock's own (enqueue, a failed attempt, reaping, reassign_owned()) or
 * anybody else's (an administrator's UPDATE of run_at, a restore), is
 * noted, so that its commit lowers its group's position.  Claims use the
 * positions only while this trigger is in place and fires always
 * (tables.c).
 */
Datum
distlock_jobs_pending(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	const DistlockCatalog *cat;
	HeapTuple	tuple;
	TupleDesc	desc;
	bool		isnull;
	DlJobPos	pos;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_FOR_ROW(td->tg_event) ||
		!TRIGGER_FIRED_AFTER(td->tg_event))
		elog(ERROR, "distlock.jobs_pending() must fire AFTER ... FOR EACH ROW");
	cat = dl_catalog();
	if (RelationGetRelid(td->tg_relation) != cat->jobs)
		elog(ERROR, "distlock.jobs_pending() fires on distlock.jobs only");
	tuple = TRIGGER_FIRED_BY_UPDATE(td->tg_event) ?
		td->tg_newtuple : td->tg_trigtuple;
	desc = RelationGetDescr(td->tg_relation);
	if (DatumGetObjectId(heap_getattr(tuple, cat->job_status, desc,
									  &isnull)) == cat->status_pending)
	{
		pos.run_at = DatumGetTimestampTz(heap_getattr(tuple, cat->job_run_at,
													  desc, &isnull));
		pos.id = DatumGetInt64(heap_getattr(tuple, cat->job_id, desc,
											&isnull));
		position_note(DatumGetObjectId(heap_getattr(tuple,
													cat->job_queue_owner,
													desc, &isnull)),
					  heap_getattr(tuple, cat->job_queue, desc, &isnull),
					  DatumGetInt32(heap_getattr(tuple, cat->job_priority,
												 desc, &isnull)),
					  pos);
	}
	return PointerGetDatum(NULL);
}
