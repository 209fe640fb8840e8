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
 * UPDATE of run_at, a restore) or a later abort of a transaction that took
 * one out of pending (a claim, a cancel, a delete).  Every statement that
 * does either fires one of the triggers jobs_pending and jobs_unpending
 * (below), and a claim on the direct path, which fires none, notes its
 * jobs itself; once the transaction's end is visible to others
 * (XACT_EVENT_COMMIT and XACT_EVENT_ABORT come after
 * ProcArrayEndTransaction; a subtransaction's abort after its abort is
 * recorded), the position of each group is lowered to the lowest key made
 * pending (at commit) or taken (at an abort), the bucket's generation is
 * bumped and the key remembered in a ring.  A claim reads the position and
 * the generation g before it takes the snapshot it scans the group with,
 * starting at the position, or at the lowest key its own transaction made
 * pending if that is lower (its own enqueues and the jobs its reaping
 * handed back are visible to it before it commits).  It moves the
 * position only to the key S of the first job it could not rule out:
 *
 *	- a job another transaction holds with a row lock only (SELECT ... FOR
 *	  UPDATE): it may let go of it, pending as it was, and nothing notes
 *	  that.  So does a job whose change rolled back while a locker kept the
 *	  version's multixact: that abort may have lowered the position before
 *	  the claim read it (tables.c counts an updater only while it runs or
 *	  once it has committed);
 *	- a job not yet due (it becomes claimable without any commit; every
 *	  later entry of the group is later still, so the walk ends there),
 *
 * or, having ruled out every entry it read, just past the last of them.
 * Every entry it passed was either read and found not pending, or claimed
 * by it, or being changed by another transaction, or invisible to its
 * snapshot: of a version deleted or updated by a committed transaction
 * (claimed, finished: it stays so), by its own transaction or one in
 * progress (every such change of a pending version is noted before it is
 * made, by the claim itself or the trigger jobs_unpending, which fires
 * BEFORE: should it roll back, its abort lowers the position), or written
 * by one that had not committed when the snapshot was taken.  Had that one
 * committed before the generation was read, the snapshot would see it; so
 * its commit lowers the position afterwards, with a generation above g.
 * When the claim sets the position, it takes the lowest key of the
 * lowerings after g from the ring (or, past the ring, the minima of the
 * epochs since), and sets the position to the smaller of S and that key
 * (nothing, if more lowerings came than the epochs keep), unless the
 * position is already further on (another claim's sound position; the
 * greater of two sound positions is sound).  So a position is sound
 * whenever it is read, but for lowerings still to come: a claim that reads
 * it just before a commit or abort lowers it may miss that job once, as a
 * claim just before the commit would, and the next claim starts at it.
 * Claims lock the rows they take, so no job is claimed twice whatever the
 * positions say.  A worker that claimed a job and left its transaction
 * open does not hold the position back.
 *
 * A claim uses the positions only while jobs_pending and jobs_unpending
 * are the table's only triggers and fire always (in replication and
 * restores too), so only a superuser can change pending versions unnoted:
 * by disabling them (claims then walk from each group's start), writing,
 * and enabling them again; what was written meanwhile may be skipped
 * until the positions are gone (a server restart).  A transaction that
 * made jobs pending or took them cannot be prepared (PREPARE TRANSACTION
 * raises 0A000, as it does after LISTEN): its end would come from another
 * backend, perhaps after a restart, and lower nothing.
 *
 * The positions are a cache: buckets by a hash of (database, jobs table,
 * owner, queue, priority), seeded at random when the shared memory is made
 * so that no role can aim at another's bucket, one position each, taken
 * over by another key on a collision; a group without one (a new group, a collision, a queue name
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
#include "common/pg_prng.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/memutils.h"

#include "compat.h"
#include "distlock.h"

PG_FUNCTION_INFO_V1(distlock_jobs_pending);

#define POSITION_BUCKETS	4096
#define POSITION_RING		16	/* lowerings remembered one by one */
#define POSITION_EPOCHS		32	/* and by their minimum, POSITION_RING
								 * generations at a time */

typedef struct PositionBucket
{
	slock_t		mutex;
	bool		used;			/* key and mark hold a position */
	DlPositionKey key;
	DlJobPos	mark;
	uint64		gen;			/* lowerings so far */
	DlJobPos	ring[POSITION_RING];	/* key of lowering gen, at gen % RING */
	DlJobPos	epoch_min[POSITION_EPOCHS]; /* lowest key of generations
											 * e * RING .. e * RING + RING - 1,
											 * at e % EPOCHS */
} PositionBucket;

typedef struct PositionShared
{
	uint64		seed;			/* of the bucket hash: no role can aim at
								 * another's bucket */
	PositionBucket buckets[POSITION_BUCKETS];
} PositionShared;

/*
 * What this transaction did to a bucket's groups: the lowest key it made
 * pending (to lower the position to at commit) and the lowest it took out
 * of pending (claimed, cancelled, deleted: pending again should it roll
 * back, so the position is lowered to it then).
 */
typedef struct PositionNote
{
	uint32		bucket;
	bool		made;
	bool		taken;
	DlJobPos	made_min;
	DlJobPos	taken_min;
} PositionNote;

static PositionShared *positions = NULL;
static bool position_callbacks_registered = false;
/*
 * This transaction's notes, one per bucket it touched (most touch one), in
 * an array kept for the life of the backend.
 */
static PositionNote *position_notes = NULL;
static int	position_nnotes = 0;
static int	position_maxnotes = 0;

static void
positions_init(void *ptr)
{
	PositionShared *ps = (PositionShared *) ptr;

	memset(ps, 0, sizeof(PositionShared));
	ps->seed = pg_prng_uint64(&pg_global_prng_state);
	for (int i = 0; i < POSITION_BUCKETS; i++)
		SpinLockInit(&ps->buckets[i].mutex);
}

static Size
positions_size(void)
{
	return sizeof(PositionShared);
}

/* From _PG_init() while shared_preload_libraries are loaded. */
void
dl_position_preload(void)
{
	DlShmemRegion region = {
		"distlock positions", positions_size, positions_init, NULL,
		(void **) &positions
	};

	dl_shmem_region(&region);
}

/*
 * Whether there are positions.  On 17 and later the DSM registry is asked
 * on every call until it answers: should it fail (out of memory, a segment
 * of another size from another build of the library), the error goes to
 * the caller, so that no backend goes on writing pending jobs unnoted
 * while others claim by the positions.
 */
bool
dl_positions_available(void)
{
	dl_attach_named_segment((void **) &positions, "distlock positions",
							sizeof(PositionShared), positions_init);
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

	if (len > DL_POSITION_NAME_MAX || !dl_positions_available())
		return false;
	memset(key, 0, sizeof(DlPositionKey));
	key->dbid = MyDatabaseId;
	key->relid = dl_catalog()->jobs;
	key->owner = owner;
	key->priority = priority;
	key->len = len;
	memcpy(key->name, VARDATA_ANY(t), len);
	*bucket = hash_bytes_extended((const unsigned char *) key,
								  sizeof(DlPositionKey), positions->seed) %
		POSITION_BUCKETS;
	return true;
}

static PositionNote *
position_note(uint32 bucket, bool create)
{
	PositionNote *note;

	for (int i = 0; i < position_nnotes; i++)
		if (position_notes[i].bucket == bucket)
			return &position_notes[i];
	if (!create)
		return NULL;
	if (position_nnotes == position_maxnotes)
	{
		int			n = Max(8, position_maxnotes * 2);

		position_notes = position_notes == NULL ?
			MemoryContextAlloc(TopMemoryContext, n * sizeof(PositionNote)) :
			repalloc(position_notes, n * sizeof(PositionNote));
		position_maxnotes = n;
	}
	note = &position_notes[position_nnotes++];
	note->bucket = bucket;
	note->made = note->taken = false;
	return note;
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
 * (the group's start if it has no position): the position, or the lowest
 * key this transaction made pending in the group's bucket if that is
 * lower (its own enqueues and the jobs its reaping handed back are its to
 * claim before it commits).  Call before taking the snapshot the group is
 * scanned with.
 */
void
dl_position_read(Oid owner, Datum queue, int32 priority, DlPositionRead *pr)
{
	PositionBucket *b;
	PositionNote *note;
	uint32		bucket;

	dl_position_none(pr);
	if (!position_key(owner, queue, priority, &pr->key, &bucket))
		return;
	pr->bucket = bucket;
	b = &positions->buckets[bucket];
	SpinLockAcquire(&b->mutex);
	pr->gen = b->gen;
	if (b->used && memcmp(&b->key, &pr->key, sizeof(DlPositionKey)) == 0)
		pr->mark = b->mark;
	SpinLockRelease(&b->mutex);
	note = position_note(bucket, false);
	if (note && note->made && dl_jobpos_cmp(&note->made_min, &pr->mark) < 0)
		pr->mark = note->made_min;
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
	b = &positions->buckets[pr->bucket];
	SpinLockAcquire(&b->mutex);
	if (b->gen - pr->gen <= POSITION_RING)
	{
		for (uint64 g = pr->gen + 1; g <= b->gen; g++)
		{
			DlJobPos   *low = &b->ring[g % POSITION_RING];

			if (dl_jobpos_cmp(low, &stop) < 0)
				stop = *low;
		}
	}
	else if (b->gen / POSITION_RING - (pr->gen + 1) / POSITION_RING <
			 POSITION_EPOCHS)
	{
		/* whole epochs: their minima, of a few lowerings before too */
		for (uint64 e = (pr->gen + 1) / POSITION_RING;
			 e <= b->gen / POSITION_RING; e++)
		{
			DlJobPos   *low = &b->epoch_min[e % POSITION_EPOCHS];

			if (dl_jobpos_cmp(low, &stop) < 0)
				stop = *low;
		}
	}
	else
	{
		SpinLockRelease(&b->mutex);
		return;
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

/* Lower bucket's position to pos, for claims in flight too. */
static void
position_lower(uint32 bucket, DlJobPos pos)
{
	PositionBucket *b = &positions->buckets[bucket];

	DlJobPos   *epoch_min;

	SpinLockAcquire(&b->mutex);
	b->gen++;
	b->ring[b->gen % POSITION_RING] = pos;
	epoch_min = &b->epoch_min[b->gen / POSITION_RING % POSITION_EPOCHS];
	if (b->gen % POSITION_RING == 0 || dl_jobpos_cmp(&pos, epoch_min) < 0)
		*epoch_min = pos;		/* the epoch's first lowering, or its lowest */
	if (b->used && dl_jobpos_cmp(&pos, &b->mark) < 0)
		b->mark = pos;
	SpinLockRelease(&b->mutex);
}

/*
 * The end of the transaction, once it is visible to others: at commit,
 * lower the positions to the jobs it made pending; at an abort, to the
 * jobs it took out of pending, which are pending again.  wake.c calls
 * this before it wakes waiters, so that they start where the jobs are;
 * whichever of the two callbacks comes first acts.
 */
void
dl_position_at_end(bool commit)
{
	for (int i = 0; i < position_nnotes; i++)
	{
		PositionNote *note = &position_notes[i];

		if (commit ? note->made : note->taken)
			position_lower(note->bucket, commit ? note->made_min :
						   note->taken_min);
	}
	position_nnotes = 0;
}

/*
 * A subtransaction's abort makes what it took out of pending pending
 * again: lower the positions to everything the transaction took so far
 * (what its other subtransactions took only costs a walk).  wake.c's
 * callback and ours may both call this for one abort: lowering twice
 * costs a ring slot, where remembering which abort was done would have to
 * be forgotten at every end of a transaction, prepared ones included.
 */
void
dl_position_at_subabort(void)
{
	for (int i = 0; i < position_nnotes; i++)
	{
		if (position_notes[i].taken)
			position_lower(position_notes[i].bucket,
						   position_notes[i].taken_min);
	}
}

static void
position_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			if (position_nnotes > 0)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that made distlock jobs pending or claimed them")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
			dl_position_at_end(event == XACT_EVENT_COMMIT);
			break;
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			position_nnotes = 0;
			break;
		default:
			break;
	}
}

static void
position_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						  SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
		dl_position_at_subabort();
}

/* Note that this transaction made pending (made) or took the job at pos. */
static void
position_add(uint32 bucket, DlJobPos pos, bool made)
{
	PositionNote *note;

	if (!position_callbacks_registered)
	{
		RegisterXactCallback(position_xact_callback, NULL);
		RegisterSubXactCallback(position_subxact_callback, NULL);
		position_callbacks_registered = true;
	}
	note = position_note(bucket, true);
	if (made && (!note->made || dl_jobpos_cmp(&pos, &note->made_min) < 0))
	{
		note->made_min = pos;
		note->made = true;
	}
	if (!made && (!note->taken || dl_jobpos_cmp(&pos, &note->taken_min) < 0))
	{
		note->taken_min = pos;
		note->taken = true;
	}
}

/*
 * Note that this transaction made a version of owner's queue's job of
 * priority at key pos pending (made) or took it out of pending.
 */
static void
position_note_job(Oid owner, Datum queue, int32 priority, DlJobPos pos,
				  bool made)
{
	DlPositionKey key;
	uint32		bucket;

	if (!position_key(owner, queue, priority, &key, &bucket))
		return;
	position_add(bucket, pos, made);
}

/*
 * The same for a bucket a claim read (dl_position_read()): the claim took
 * the job at pos.
 */
void
dl_position_taken(const DlPositionRead *pr, DlJobPos pos)
{
	if (pr->bucket >= 0)
		position_add(pr->bucket, pos, false);
}

/*
 * The triggers jobs_pending ('new': AFTER INSERT OR UPDATE WHEN NEW.status
 * is pending) and jobs_unpending ('old': BEFORE UPDATE OR DELETE WHEN
 * OLD.status is pending) on distlock.jobs, enabled ALWAYS (so also in
 * replication and restores).  Every version a statement makes pending, or
 * takes out of pending, is noted, whoever runs the statement (distlock's
 * own: an enqueue, a failed attempt, reaping, a claim or cancel on the SQL
 * path, reassign_owned(); anybody else's: an administrator's UPDATE of
 * run_at, a restore), so that its commit or abort lowers its group's
 * position.  A version is noted as taken before it is changed: a claim
 * that finds it being changed may pass it, for should the change roll
 * back, the note lowers the position.  Claims use the positions only while
 * both triggers are in place and fire always (tables.c).
 */
Datum
distlock_jobs_pending(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	const DistlockCatalog *cat;
	HeapTuple	tuple;
	TupleDesc	desc;
	bool		isnull;
	bool		made;
	DlJobPos	pos;

	if (!CALLED_AS_TRIGGER(fcinfo) ||
		!TRIGGER_FIRED_FOR_ROW(td->tg_event) ||
		td->tg_trigger->tgnargs != 1)
		elog(ERROR, "distlock.jobs_pending() must fire FOR EACH ROW, with 'new' or 'old'");
	made = strcmp(td->tg_trigger->tgargs[0], "new") == 0;
	if (made ? !TRIGGER_FIRED_AFTER(td->tg_event) :
		!TRIGGER_FIRED_BEFORE(td->tg_event))
		elog(ERROR, "distlock.jobs_pending('new') must fire AFTER, ('old') BEFORE");
	cat = dl_catalog();
	if (RelationGetRelid(td->tg_relation) != cat->jobs)
		elog(ERROR, "distlock.jobs_pending() fires on distlock.jobs only");
	if (made)
		tuple = TRIGGER_FIRED_BY_UPDATE(td->tg_event) ?
			td->tg_newtuple : td->tg_trigtuple;
	else
		tuple = td->tg_trigtuple;	/* the old row of an UPDATE or DELETE */
	desc = RelationGetDescr(td->tg_relation);
	if (DatumGetObjectId(heap_getattr(tuple, cat->job_status, desc,
									  &isnull)) == cat->status_pending)
	{
		pos.run_at = DatumGetTimestampTz(heap_getattr(tuple, cat->job_run_at,
													  desc, &isnull));
		pos.id = DatumGetInt64(heap_getattr(tuple, cat->job_id, desc,
											&isnull));
		position_note_job(DatumGetObjectId(heap_getattr(tuple,
														cat->job_queue_owner,
														desc, &isnull)),
						  heap_getattr(tuple, cat->job_queue, desc, &isnull),
						  DatumGetInt32(heap_getattr(tuple, cat->job_priority,
													 desc, &isnull)),
						  pos, made);
	}
	if (made)
		return PointerGetDatum(NULL);
	/* BEFORE: the row goes on as it is */
	return PointerGetDatum(TRIGGER_FIRED_BY_UPDATE(td->tg_event) ?
						   td->tg_newtuple : td->tg_trigtuple);
}
