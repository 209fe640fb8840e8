/*-------------------------------------------------------------------------
 *
 * beat.c
 *		Heartbeats kept in shared memory, persisted ahead.
 *
 * A heartbeat promises its session life until now + ttl.  Written to the
 * session's row every time, that is a row version, index entries and WAL
 * per beat.  With shared memory (distlock preloaded, or the DSM registry
 * on 17 and later) the promise is kept here instead, and the row's
 * expires_at becomes a bound the promise never passes: when a beat would
 * promise past the row, the row is written once, ahead, to the promise
 * plus A (three ttls, at most distlock.heartbeat_persist_ahead), and the
 * beats until then write nothing.
 *
 * An entry speaks for one version of the row's expires_at: the one it
 * was made with (persisted).  Every judge of a session reads the row
 * first, then the entry (dl_beat_effective()): an entry whose persisted
 * is the row's value gives the session's expiry (live, never later than
 * the row); any other row value (written since by someone else, restored,
 * changed by the extension's owner) rules alone.  Reading the row first
 * errs early, never late: a write committed between the two reads leaves
 * the old row value, below what the write promised, and an "expired"
 * judgement is confirmed under the beat lock as before (session.c).
 *
 * No promise changes before the transaction commits: a heartbeat notes
 * what it promised, and the commit callback, which runs once the commit
 * is visible and before its locks (the beat lock among them) are let go,
 * applies it; an abort drops it.  The transaction itself sees its notes.
 * An entry a transaction is about to change is pinned, so that no other
 * backend takes its slot meanwhile; a beat that writes the row also
 * publishes the pair it writes (pending), which only a reader of the new
 * row, visible from the commit on, can match: between the commit and its
 * callback such a reader would otherwise take the row, ahead by A.
 *
 * Crash and failover: shared memory is gone, and the row's expires_at,
 * which is never below a promise that rests on it, rules: a session may
 * outlive its last promise by at most A, and never dies before it.  A
 * beat writes nothing only while the commit of the row it rests on
 * (persist_lsn) is as durable as its own commit would be: flushed and,
 * when this backend's commits wait for synchronous standbys, confirmed by
 * them as far as its synchronous_commit asks.  A row written by a beat
 * that ran with less (synchronous_commit off, or local beside a
 * synchronous standby) could be lost by a crash or a failover, and a
 * promise resting on it with it; until then the beat writes, and its own
 * commit waits as any other.
 *
 * A slot is taken over only when its entry no longer changes anybody's
 * judgement: when it says what the row says (live = persisted), or when
 * both have passed.  When no slot can be had, the heartbeat writes its
 * promise to the row exactly, as without shared memory.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/beat.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "fmgr.h"
#include "common/hashfn.h"
#include "common/pg_prng.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "replication/syncrep.h"
#include "replication/walsender.h"
#include "replication/walsender_private.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "compat.h"
#include "distlock.h"

PG_FUNCTION_INFO_V1(distlock_session_expiry);

#define BEAT_SETS	1024
#define BEAT_WAYS	4
#define BEAT_DUE_SLOTS	16
#define BEAT_DUE(dbid)	(&beats->due[(dbid) % BEAT_DUE_SLOTS])
#define BEAT_OTHERS_BACKOFF	USECS_PER_SEC	/* see dl_beat_expired() */

typedef struct BeatEntry
{
	Oid			dbid;			/* InvalidOid: free */
	pg_uuid_t	id;
	TimestampTz live;			/* the last promise committed */
	TimestampTz persisted;		/* the row's expires_at it speaks for */
	XLogRecPtr	persist_lsn;	/* where that row's commit ended */
	int			pinned_by;		/* 1 + procno of a backend about to change
								 * it, or 0 */
	bool		gone;			/* the row was deleted: not for reaping */
	bool		promised;		/* live is a heartbeat's promise, not a
								 * copy of the row's expires_at */
	/*
	 * A row write by the pinning backend, not yet committed: once its
	 * commit is visible and until its callback has run, a reader that finds
	 * the row saying pending_persisted takes pending_live.
	 */
	bool		pending;
	TimestampTz pending_live;
	TimestampTz pending_persisted;
} BeatEntry;

typedef struct BeatSet
{
	slock_t		mutex;
	BeatEntry	entries[BEAT_WAYS];
} BeatSet;

typedef struct BeatShared
{
	uint64		seed;			/* of the set hash */
	/*
	 * No entry ahead of its row, of a database that maps to the slot,
	 * expires before this (a lower bound: reap() sets it again).
	 */
	pg_atomic_uint64 due[BEAT_DUE_SLOTS];
	BeatSet		sets[BEAT_SETS];
} BeatShared;

/* What this transaction promised, applied at its commit. */
typedef struct BeatNote
{
	pg_uuid_t	id;
	int			set;
	int			way;
	int			level;			/* transaction nesting level of the beat */
	bool		wrote;			/* the row was written, to persisted */
	TimestampTz live;
	TimestampTz persisted;
} BeatNote;

#define MAX_BEAT_NOTES	16
#define MAX_BEAT_GONE	64

/* Sessions this transaction deleted, and at what nesting level. */
typedef struct BeatGone
{
	pg_uuid_t	id;
	int			level;
} BeatGone;

int			dl_heartbeat_persist_ahead = 300000;

static BeatShared *beats = NULL;
static BeatNote beat_notes[MAX_BEAT_NOTES];
static int	beat_nnotes = 0;
static BeatGone beat_gone[MAX_BEAT_GONE];
static int	beat_ngone = 0;
static bool beat_callbacks_registered = false;

static void
beats_init(void *ptr)
{
	BeatShared *bs = (BeatShared *) ptr;

	memset(bs, 0, sizeof(BeatShared));
	bs->seed = pg_prng_uint64(&pg_global_prng_state);
	for (int i = 0; i < BEAT_DUE_SLOTS; i++)
		pg_atomic_init_u64(&bs->due[i], (uint64) PG_INT64_MAX);
	for (int i = 0; i < BEAT_SETS; i++)
		SpinLockInit(&bs->sets[i].mutex);
}

static Size
beats_size(void)
{
	return sizeof(BeatShared);
}

/* From _PG_init() while shared_preload_libraries are loaded. */
void
dl_beat_preload(void)
{
	DlShmemRegion region = {
		"distlock heartbeats", beats_size, beats_init, NULL, (void **) &beats
	};

	dl_shmem_region(&region);
}

/*
 * Whether heartbeats are kept in shared memory.  Every judge asks before
 * it reads an entry: on 17 and later a backend that has not attached yet
 * must not judge by the row alone while others beat in shared memory, so
 * a failure to attach is the caller's error.
 */
static bool
beats_available(void)
{
	dl_attach_named_segment((void **) &beats, "distlock heartbeats",
							sizeof(BeatShared), beats_init);
	return beats != NULL;
}

static int
beat_set_of(const pg_uuid_t *id)
{
	uint64		h = hash_bytes_extended(id->data, UUID_LEN, beats->seed);

	return (int) ((h ^ MyDatabaseId) % BEAT_SETS);
}

static int
beat_find(BeatSet *set, const pg_uuid_t *id)
{
	for (int w = 0; w < BEAT_WAYS; w++)
	{
		BeatEntry  *e = &set->entries[w];

		if (e->dbid == MyDatabaseId &&
			memcmp(e->id.data, id->data, UUID_LEN) == 0)
			return w;
	}
	return -1;
}

/* Lower database dbid's due bound to live. */
static void
beat_due_lower(Oid dbid, TimestampTz live)
{
	pg_atomic_uint64 *due = BEAT_DUE(dbid);
	uint64		cur = pg_atomic_read_u64(due);

	while ((int64) cur > live &&
		   !pg_atomic_compare_exchange_u64(due, &cur, (uint64) live))
		;
}

/*
 * session id's expiry, for a judge that has just read expires_at
 * (row_expires) from its row as last committed.
 */
TimestampTz
dl_beat_effective(Datum id, TimestampTz row_expires)
{
	const pg_uuid_t *uuid = DatumGetUUIDP(id);
	BeatSet    *set;
	TimestampTz result = row_expires;
	int			w;

	if (!beats_available())
		return row_expires;
	/* this transaction's own promise, as it sees its own row changes */
	for (int i = beat_nnotes - 1; i >= 0; i--)
	{
		if (memcmp(beat_notes[i].id.data, uuid->data, UUID_LEN) == 0)
		{
			if (beat_notes[i].persisted == row_expires)
				return beat_notes[i].live;
			break;
		}
	}
	set = &beats->sets[beat_set_of(uuid)];
	SpinLockAcquire(&set->mutex);
	w = beat_find(set, uuid);
	if (w >= 0 && set->entries[w].pending &&
		set->entries[w].pending_persisted == row_expires)
		result = set->entries[w].pending_live;
	else if (w >= 0 && set->entries[w].persisted == row_expires)
		result = set->entries[w].live;
	SpinLockRelease(&set->mutex);
	return result;
}

/* Whether some session may have expired in shared memory before now. */
bool
dl_beat_due(TimestampTz now)
{
	if (!beats_available())
		return false;
	return (int64) pg_atomic_read_u64(BEAT_DUE(MyDatabaseId)) <= now;
}

static void
beat_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			if (beat_nnotes > 0)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that heartbeated a distlock session")));
			break;
		case XACT_EVENT_COMMIT:
			dl_beat_at_end(true);
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			dl_beat_at_end(false);
			break;
		default:
			break;
	}
}

/* Unpin, and drop, the notes made at nesting level level or deeper. */
static void
beat_drop_notes(int level)
{
	int			kept = 0;

	for (int i = 0; i < beat_nnotes; i++)
	{
		BeatNote   *note = &beat_notes[i];
		BeatSet    *set;

		if (note->level < level)
		{
			beat_notes[kept++] = *note;
			continue;
		}
		Assert(beats != NULL);
		set = &beats->sets[note->set];
		SpinLockAcquire(&set->mutex);
		set->entries[note->way].pinned_by = 0;
		set->entries[note->way].pending = false;
		SpinLockRelease(&set->mutex);
	}
	beat_nnotes = kept;
	kept = 0;
	for (int i = 0; i < beat_ngone; i++)
	{
		if (beat_gone[i].level < level)
			beat_gone[kept++] = beat_gone[i];
	}
	beat_ngone = kept;
}

static void
beat_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					  SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();

	if (event == SUBXACT_EVENT_ABORT_SUB)
		beat_drop_notes(level);
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		for (int i = 0; i < beat_nnotes; i++)
		{
			if (beat_notes[i].level >= level)
				beat_notes[i].level = level - 1;
		}
		for (int i = 0; i < beat_ngone; i++)
		{
			if (beat_gone[i].level >= level)
				beat_gone[i].level = level - 1;
		}
	}
}

static void
beat_register_callbacks(void)
{
	if (!beat_callbacks_registered)
	{
		RegisterXactCallback(beat_xact_callback, NULL);
		RegisterSubXactCallback(beat_subxact_callback, NULL);
		beat_callbacks_registered = true;
	}
}

/*
 * At the end of the transaction: apply its promises at commit (it is
 * visible, its locks still held), drop them otherwise.  Spinlocks and
 * stores only: this must not fail.
 */
void
dl_beat_at_end(bool commit)
{
	if (!commit)
	{
		beat_drop_notes(0);
		return;
	}
	if (beats == NULL)
		return;
	for (int i = 0; i < beat_nnotes; i++)
	{
		BeatNote   *note = &beat_notes[i];
		BeatSet    *set = &beats->sets[note->set];
		BeatEntry  *e = &set->entries[note->way];
		TimestampTz live;
		TimestampTz persisted;

		SpinLockAcquire(&set->mutex);
		if (note->wrote)
		{
			e->live = note->live;
			e->persisted = note->persisted;
			e->persist_lsn = XactLastCommitEnd;
		}
		else if (e->promised)
			e->live = Max(e->live, note->live);
		else
			e->live = note->live;	/* live was a copy of the row's */
		e->promised = true;
		e->pending = false;
		e->pinned_by = 0;
		live = e->live;
		persisted = e->persisted;
		SpinLockRelease(&set->mutex);
		if (live < persisted)
			beat_due_lower(MyDatabaseId, live);
	}
	beat_nnotes = 0;
	for (int i = 0; i < beat_ngone; i++)
	{
		BeatSet    *set = &beats->sets[beat_set_of(&beat_gone[i].id)];
		int			w;

		SpinLockAcquire(&set->mutex);
		w = beat_find(set, &beat_gone[i].id);
		if (w >= 0)
			set->entries[w].gone = true;
		SpinLockRelease(&set->mutex);
	}
	beat_ngone = 0;
}

/*
 * This transaction deletes session id's row: once it commits, the entry
 * (which goes on answering for the row a reader may still have read) is
 * no longer a candidate for reaping.  Beyond MAX_BEAT_GONE, reap() only
 * finds the row missing.
 */
void
dl_beat_gone(Datum id)
{
	if (!beats_available() || beat_ngone == MAX_BEAT_GONE)
		return;
	beat_register_callbacks();
	beat_gone[beat_ngone].id = *DatumGetUUIDP(id);
	beat_gone[beat_ngone].level = GetCurrentTransactionNestLevel();
	beat_ngone++;
}

/*
 * Pin the entry of session id, making one that says what the row says
 * (row_expires) if there is none and a slot can be had; *entry is set to
 * a copy of it.  Returns false when no slot can be had, or when
 * distlock.heartbeat_persist_ahead is 0 or shared memory is missing.  The
 * caller notes the pin (beat_note()) before anything can fail.
 */
static bool
beat_pin(const pg_uuid_t *id, TimestampTz row_expires, int *set_no, int *way,
		 BeatEntry *entry)
{
	BeatSet    *set;
	TimestampTz now = GetCurrentTimestamp();
	int			w;

	if (dl_heartbeat_persist_ahead <= 0 || !beats_available() ||
		beat_nnotes == MAX_BEAT_NOTES)
		return false;
	beat_register_callbacks();
	*set_no = beat_set_of(id);
	set = &beats->sets[*set_no];
	SpinLockAcquire(&set->mutex);
	w = beat_find(set, id);
	if (w < 0)
	{
		for (int v = 0; v < BEAT_WAYS && w < 0; v++)
		{
			BeatEntry  *e = &set->entries[v];

			if (e->pinned_by == 0 &&
				(e->dbid == InvalidOid || e->live >= e->persisted ||
				 e->persisted <= now))
				w = v;
		}
		if (w >= 0)
		{
			BeatEntry  *e = &set->entries[w];

			e->dbid = MyDatabaseId;
			e->id = *id;
			e->gone = false;
			e->promised = false;
			e->pending = false;
			e->live = row_expires;
			e->persisted = row_expires;
			/* not known flushed: the next beat writes */
			e->persist_lsn = PG_UINT64_MAX;
		}
	}
	if (w >= 0 && set->entries[w].pinned_by != 0)
		w = -1;					/* another beat of it: the beat lock forbids */
	if (w >= 0)
	{
		set->entries[w].pinned_by = dl_my_procno() + 1;
		*entry = set->entries[w];
	}
	SpinLockRelease(&set->mutex);
	*way = w;
	return w >= 0;
}

static void
beat_note(const pg_uuid_t *id, int set_no, int way, bool wrote,
		  TimestampTz live, TimestampTz persisted)
{
	BeatNote   *note = &beat_notes[beat_nnotes++];

	note->id = *id;
	note->set = set_no;
	note->way = way;
	note->level = GetCurrentTransactionNestLevel();
	note->wrote = wrote;
	note->live = live;
	note->persisted = persisted;
}

static void
beat_unpin(int set_no, int way)
{
	BeatSet    *set = &beats->sets[set_no];

	SpinLockAcquire(&set->mutex);
	set->entries[way].pinned_by = 0;
	SpinLockRelease(&set->mutex);
}

/*
 * Pin session id's entry (beat_pin()) for a heartbeat promising *promise,
 * which never moves back from the entry's last promise, should the clock.
 */
static bool
beat_pin_promise(Datum id, TimestampTz row_expires, TimestampTz *promise,
				 int *set_no, int *way, BeatEntry *entry)
{
	if (!beat_pin(DatumGetUUIDP(id), row_expires, set_no, way, entry))
		return false;
	if (entry->persisted == row_expires && entry->promised)
		*promise = Max(*promise, entry->live);
	return true;
}

/*
 * Whether synchronous standbys may be defined, erring towards yes.  The
 * byte core keeps for it was a bool (1: defined) before the minor releases
 * of 2025 and is flags since (1: read from the setting, 2: defined), and
 * the server may be of either kind whatever headers distlock was built
 * with; so it is read as a byte, and the setting counts too (the
 * checkpointer may not have read a change of it yet).
 */
static bool
beat_sync_standbys_defined(void)
{
	uint8		flags = *(volatile uint8 *) &WalSndCtl->DL_SYNC_STANDBYS_BYTE;

	return (flags & 2) != 0 ||
		(SyncRepStandbyNames != NULL && SyncRepStandbyNames[0] != '\0');
}

/*
 * Whether the commit that ended at lsn is as durable as this backend's own
 * commit would be now (see the header comment): flushed here, and
 * confirmed by the synchronous standbys as far as synchronous_commit asks
 * whenever this backend's commit may wait for them (the comparison
 * SyncRepWaitForLSN() makes).  The confirmed positions only rise: when the
 * synchronous standbys change, they may speak for one that is gone, as
 * they do for a commit.
 */
static bool
beat_row_durable(XLogRecPtr lsn)
{
	int			mode;
	bool		durable;

	if (lsn > GetFlushRecPtr(NULL))
		return false;
	if (!SyncRepRequested() || !beat_sync_standbys_defined())
		return true;
	if (synchronous_commit == SYNCHRONOUS_COMMIT_REMOTE_WRITE)
		mode = SYNC_REP_WAIT_WRITE;
	else if (synchronous_commit == SYNCHRONOUS_COMMIT_REMOTE_APPLY)
		mode = SYNC_REP_WAIT_APPLY;
	else
		mode = SYNC_REP_WAIT_FLUSH;
	LWLockAcquire(SyncRepLock, LW_SHARED);
	durable = lsn <= WalSndCtl->lsn[mode];
	LWLockRelease(SyncRepLock);
	return durable;
}

/*
 * A heartbeat of session id, judged live under its beat and use locks at
 * READ COMMITTED, whose row says row_expires as last committed: if its
 * promise can be kept in shared memory without writing the row (the row
 * is ahead of it and durable), note it, to be applied at commit, and
 * return true.
 */
bool
dl_beat_skip_write(Datum id, TimestampTz row_expires, TimestampTz promise)
{
	BeatEntry	entry;
	int			set_no;
	int			way;

	if (!beat_pin_promise(id, row_expires, &promise, &set_no, &way, &entry))
		return false;
	if (entry.persisted != row_expires || promise > row_expires ||
		!beat_row_durable(entry.persist_lsn))
	{
		beat_unpin(set_no, way);
		return false;
	}
	beat_note(DatumGetUUIDP(id), set_no, way, false, promise, row_expires);
	return true;
}

/*
 * The expires_at a heartbeat that writes session id's row (locked, saying
 * row_expires) must write for promise: ahead of it by A, its entry pinned
 * and the promise noted, to be applied at commit; or, without a slot (or
 * shared memory), the promise itself.  ttl_us is the session's ttl.
 */
TimestampTz
dl_beat_write(Datum id, TimestampTz row_expires, TimestampTz promise,
			  int64 ttl_us)
{
	BeatEntry	entry;
	BeatSet    *set;
	int			set_no;
	int			way;
	int64		a;
	TimestampTz persisted;

	if (!beat_pin_promise(id, row_expires, &promise, &set_no, &way, &entry))
		return promise;
	a = Min(3 * ttl_us, (int64) dl_heartbeat_persist_ahead * 1000);
	persisted = promise + Max(a, 0);
	beat_note(DatumGetUUIDP(id), set_no, way, true, promise, persisted);
	set = &beats->sets[set_no];
	SpinLockAcquire(&set->mutex);
	set->entries[way].pending = true;
	set->entries[way].pending_live = promise;
	set->entries[way].pending_persisted = persisted;
	SpinLockRelease(&set->mutex);
	return persisted;
}

/*
 * Up to max ids of this database's sessions whose promise has passed at
 * now while their rows say later: reap() finds the others by the rows'
 * expires_at.  Resets the due bound to what is left, of every database
 * that shares it: the bound tells claims when to reap in passing, and
 * another database's may have no background worker reaping it (not in
 * distlock.maintenance_databases, or not preloaded).  A promise of another
 * database that has passed makes the bound due again here only
 * BEAT_OTHERS_BACKOFF later: this database's claims then look for expired
 * sessions in vain, once per backoff, until that database reaps or the row
 * passes too (at most distlock.heartbeat_persist_ahead), and that
 * database's claims reap it in passing at most that much late.
 */
int
dl_beat_expired(TimestampTz now, pg_uuid_t *ids, int max)
{
	int			n = 0;
	TimestampTz due = PG_INT64_MAX;

	if (!beats_available())
		return 0;
	/* a full barrier: commits from here on lower it again, seen or not */
	(void) pg_atomic_exchange_u64(BEAT_DUE(MyDatabaseId), (uint64) PG_INT64_MAX);
	for (int s = 0; s < BEAT_SETS; s++)
	{
		BeatSet    *set = &beats->sets[s];

		SpinLockAcquire(&set->mutex);
		for (int w = 0; w < BEAT_WAYS; w++)
		{
			BeatEntry  *e = &set->entries[w];

			/*
			 * Only what the walk through the rows' expires_at cannot find:
			 * not deleted, row still ahead.
			 */
			if (e->dbid == InvalidOid ||
				BEAT_DUE(e->dbid) != BEAT_DUE(MyDatabaseId) || e->gone ||
				e->live >= e->persisted || e->persisted <= now)
				continue;
			if (e->dbid == MyDatabaseId)
			{
				due = Min(due, e->live);
				if (e->live <= now && n < max)
					ids[n++] = e->id;
			}
			else
				due = Min(due, Max(e->live, now + BEAT_OTHERS_BACKOFF));
		}
		SpinLockRelease(&set->mutex);
	}
	beat_due_lower(MyDatabaseId, due);
	return n;
}

/*
 * session_expiry(session_id uuid, expires_at timestamptz) RETURNS
 * timestamptz
 *
 * When the session expires whose row says expires_at: for the views'
 * statements, which read the row first.
 */
Datum
distlock_session_expiry(PG_FUNCTION_ARGS)
{
	PG_RETURN_TIMESTAMPTZ(dl_beat_effective(PG_GETARG_DATUM(0),
											PG_GETARG_TIMESTAMPTZ(1)));
}
