/*-------------------------------------------------------------------------
 *
 * wake.c
 *		Who is waiting in the server for what, and waking them when a
 *		transaction that made it available commits.
 *
 * A waiting call (wait.c) sleeps on its backend's latch.  What it waits for
 * has a kind (jobs of a queue, or a lease) and a 64-bit key (a hash of the
 * queue or lock name), in its database.  The waiters are kept in shared
 * memory, one slot per PGPROC, each with a ticket drawn from one counter
 * when it begins to wait, so that the oldest waiter of a key is known.
 *
 * Lease waiters for one name stand in a line (wait.c): only the first, the
 * one with the lowest ticket, tries for the lease, and it is the one woken
 * when the lease may be free (released, its holder's session ended); when
 * it leaves, the next is woken.
 *
 * The shared memory comes from shared_preload_libraries (the shmem hooks,
 * as contrib/pg_stat_statements does) or, on PostgreSQL 17 and later
 * without preloading, from the DSM registry on first use.  Without either
 * (15 and 16 without preloading) there is none: nobody is woken, and a
 * waiter looks again every distlock.wait_poll_interval instead.  Nothing
 * else differs.
 *
 * Why no wake-up is lost.  A waiter takes its slot before it first looks
 * for work, and resets its latch before every look (wait.c).  A call that
 * makes work available (an enqueue, a job handed back, a lease released)
 notes the key and the number of jobs in its transaction; once the
 * transaction has committed (XACT_EVENT_COMMIT comes after the commit is
 * visible to others) the notes are acted on: for each, that many of the
 * key's oldest waiters not yet woken are marked woken and their latches
 * set.  A claim notes its jobs for an abort in the same way: a claim that
 * rolls back gives them back.  So a waiter either sees the work when it
 * looks, or was already waiting, and then is woken, or another waiter is.
 * A waiter takes its wake-up (clears the mark) just before it looks, and
 * does not sleep while the mark is set: the latch alone could be reset by
 * a lock or I/O wait in between.  A woken waiter that cannot use the
 * wake-up hands it on to the next oldest waiter of its key when it leaves
 * (timeout, cancel, error, disconnect) before its look is done.  (Every
 * waiter of a queue may take every job of it: grants.c.)  One that was not
 * woken (it looked at a due time) and took as many jobs as it asked for
 * wakes the next (there may be more), who hands nothing on if it finds
 * none.  One that found a job due later (and may be the only one that
 * knows) wakes the next when it stops waiting, however it stops, unless
 * another waiter knows of one due as soon; that one looks and learns of it.
 * A wake-up is handed only to a waiter that came later, so it never
 * goes round in circles.  So one job wakes one waiter, not the herd.  What
 * no note covers (a transaction committed with PREPARE TRANSACTION, whose
 * COMMIT PREPARED may run in another backend) is found at the waiter's
 * next look: when its wait ends, or when the job it knew would be due next
 * becomes due.
 *
 * Locking: one LWLock over all slots, held only to read or change slots
 * and to set latches, never while anything else is taken.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/wake.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/twophase.h"
#include "access/xact.h"
#include "libpq/libpq-be.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "tcop/dest.h"
#include "tcop/tcopprot.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "distlock.h"

/* A backend's place among the waiters, under WaitShared.lock. */
typedef struct WaitSlot
{
	uint64		ticket;			/* 0 while not waiting */
	Oid			dbid;
	int			kind;			/* DistlockWaitKind */
	uint64		key;
	uint64		session_key;	/* lease waiters: key of the holder's session */
	bool		woken;			/* woken, and has not looked since */
	TimestampTz known_due;		/* queue waiters: when the job due next that
								 * its last look found becomes due, or 0 */
} WaitSlot;

typedef struct WaitShared
{
	LWLock		lock;
	int			tranche;
	int			nslots;
	uint64		next_ticket;
	WaitSlot	slots[FLEXIBLE_ARRAY_MEMBER];
} WaitShared;

/* Work this transaction made available, to announce once it commits. */
typedef struct PendingWake
{
	int			kind;
	uint64		key;
	int64		count;
	int			abort_level;	/* 0: at commit; else at the abort of this
								 * transaction nest level or an outer one */
} PendingWake;

/* distlock.wait_poll_interval: see distlock.c */
int			dl_wait_poll_interval = 20;

static WaitShared *wait_shared = NULL;
static bool wait_taken = false;	/* a wake-up taken, its look not done */
static bool wait_attach_tried = false;
static bool wait_callbacks_registered = false;
static List *wait_pending = NIL;	/* of PendingWake, in TopTransactionContext */

static void wake_oldest(int kind, uint64 key, Oid dbid, int64 count,
						uint64 after);

/* One slot for every PGPROC there can be. */
static int
wait_nslots(void)
{
	return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
}

static Size
wait_shared_size(int nslots)
{
	return add_size(offsetof(WaitShared, slots),
					mul_size(nslots, sizeof(WaitSlot)));
}

static void
wait_shared_init(void *ptr)
{
	WaitShared *ws = (WaitShared *) ptr;
	int			nslots = wait_nslots();

	memset(ws, 0, wait_shared_size(nslots));
	ws->tranche = LWLockNewTrancheId();
	LWLockInitialize(&ws->lock, ws->tranche);
	ws->nslots = nslots;
	ws->next_ticket = 1;
}

static Size
wait_shared_size_now(void)
{
	return wait_shared_size(wait_nslots());
}

static void
wait_shared_attached(void *ptr)
{
	LWLockRegisterTranche(((WaitShared *) ptr)->tranche, "distlock");
}

/* From _PG_init() while shared_preload_libraries are loaded. */
void
dl_wake_preload(void)
{
	DlShmemRegion region = {
		"distlock waiters", wait_shared_size_now, wait_shared_init,
		wait_shared_attached, (void **) &wait_shared
	};

	dl_shmem_region(&region);
}

/*
 * Whether this backend has the waiters' shared memory, attaching to it
 * through the DSM registry on first use where there is one.
 */
bool
dl_wake_available(void)
{
	if (!wait_attach_tried)
	{
		/*
		 * An attach that fails raises, and the next call tries again: a
		 * backend that gave up would wake nobody for the rest of its life,
		 * while the waiters, attached, do not poll.
		 */
		dl_attach_named_segment((void **) &wait_shared, "distlock waiters",
								wait_shared_size(wait_nslots()),
								wait_shared_init);
		wait_attach_tried = true;
		if (wait_shared != NULL)
		{
			LWLockRegisterTranche(wait_shared->tranche, "distlock");
			if (dl_my_procno() >= wait_shared->nslots)
				wait_shared = NULL;
		}
	}
	return wait_shared != NULL;
}

static WaitSlot *
wait_my_slot(void)
{
	return &wait_shared->slots[dl_my_procno()];
}

/* Leave the waiters should the backend exit while among them. */
static void
wait_on_exit(int code, Datum arg)
{
	dl_wait_end();
}

/*
 * Begin to wait for kind and key in this database: from now on, work made
 * available for it can wake this backend.
 */
void
dl_wait_begin(DistlockWaitKind kind, uint64 key)
{
	WaitSlot   *slot;
	static bool exit_registered = false;

	if (!dl_wake_available())
		return;
	if (!exit_registered)
	{
		before_shmem_exit(wait_on_exit, (Datum) 0);
		exit_registered = true;
	}
	slot = wait_my_slot();
	LWLockAcquire(&wait_shared->lock, LW_EXCLUSIVE);
	slot->ticket = wait_shared->next_ticket++;
	slot->dbid = MyDatabaseId;
	slot->kind = kind;
	slot->key = key;
	slot->session_key = 0;
	slot->woken = false;
	slot->known_due = 0;
	LWLockRelease(&wait_shared->lock);
}

/*
 * A lease waiter's holder is bound to the session of session_key (0: to
 * none): the session's end wakes it too.
 */
void
dl_wait_also(uint64 session_key)
{
	if (wait_shared == NULL || wait_my_slot()->ticket == 0)
		return;
	LWLockAcquire(&wait_shared->lock, LW_EXCLUSIVE);
	wait_my_slot()->session_key = session_key;
	LWLockRelease(&wait_shared->lock);
}

/*
 * Whether this backend was woken since it last asked; asking takes the
 * wake-up.  A waiter asks just before it looks for work: a wake-up that
 * comes during or after the look stays, and keeps dl_wait_sleep() from
 * sleeping.
 */
bool
dl_wait_take_wakeup(void)
{
	WaitSlot   *slot;
	bool		woken;

	if (wait_shared == NULL)
		return false;
	slot = wait_my_slot();
	LWLockAcquire(&wait_shared->lock, LW_EXCLUSIVE);
	woken = slot->ticket != 0 && slot->woken;
	slot->woken = false;
	LWLockRelease(&wait_shared->lock);
	/* until the look is done, the wake-up is still to be handed on */
	wait_taken = woken;
	return woken;
}

/* The look that followed dl_wait_take_wakeup() is done. */
void
dl_wait_looked(void)
{
	wait_taken = false;
}

/* Whether waiting slot s waits for what slot me waits for. */
static inline bool
wait_alike(const WaitSlot *s, const WaitSlot *me)
{
	return s->ticket != 0 && s->kind == me->kind && s->key == me->key &&
		s->dbid == me->dbid;
}

/*
 * Whether this backend is the first in the line of lease waiters for its
 * key: none waiting for it came earlier.
 */
bool
dl_wait_first(void)
{
	WaitSlot   *me;
	bool		first = true;

	if (wait_shared == NULL || wait_my_slot()->ticket == 0)
		return true;
	me = wait_my_slot();
	LWLockAcquire(&wait_shared->lock, LW_SHARED);
	for (int i = 0; i < wait_shared->nslots && first; i++)
	{
		WaitSlot   *s = &wait_shared->slots[i];

		first = !(wait_alike(s, me) && s->ticket < me->ticket);
	}
	LWLockRelease(&wait_shared->lock);
	return first;
}

/*
 * Wake the oldest waiter of this backend's kind and key that came after
 * it: a wake-up handed on only goes forward, so it cannot come back.
 */
void
dl_wait_pass_on(void)
{
	WaitSlot   *slot;

	if (wait_shared == NULL)
		return;
	slot = wait_my_slot();
	if (slot->ticket == 0)
		return;
	LWLockAcquire(&wait_shared->lock, LW_EXCLUSIVE);
	wake_oldest(slot->kind, slot->key, slot->dbid, 1, slot->ticket);
	LWLockRelease(&wait_shared->lock);
}

/*
 * When the job due next that this waiter's last look found becomes due (0:
 * none).  It may be the only one that knows (a transaction wakes one
 * waiter per job it made available, however far off it is due): when it
 * stops waiting, however it stops, it wakes the next, who looks and learns
 * of that job in turn, unless another waiter knows of one due as soon.
 */
void
dl_wait_knew_due(TimestampTz due)
{
	if (wait_shared == NULL || wait_my_slot()->ticket == 0)
		return;
	LWLockAcquire(&wait_shared->lock, LW_EXCLUSIVE);
	wait_my_slot()->known_due = due;
	LWLockRelease(&wait_shared->lock);
}

/*
 * Whether a waiter of slot's key other than slot knows of a job due no
 * later than the one slot knows of.  Caller holds the lock.
 */
static bool
wait_due_known_elsewhere(const WaitSlot *slot)
{
	for (int i = 0; i < wait_shared->nslots; i++)
	{
		const WaitSlot *s = &wait_shared->slots[i];

		if (s != slot && wait_alike(s, slot) &&
			s->known_due != 0 && s->known_due <= slot->known_due)
			return true;
	}
	return false;
}

/* Whether a wake-up has come that this backend has not taken. */
static bool
wait_woken(void)
{
	bool		woken;

	if (wait_shared == NULL || wait_my_slot()->ticket == 0)
		return false;
	LWLockAcquire(&wait_shared->lock, LW_SHARED);
	woken = wait_my_slot()->woken;
	LWLockRelease(&wait_shared->lock);
	return woken;
}

/*
 * Stop waiting.  A wake-up this backend has not taken goes to the next
 * waiter, and so does what it knew of a job due later.  Safe to call when
 * not waiting.
 */
void
dl_wait_end(void)
{
	WaitSlot   *slot;

	if (wait_shared == NULL)
		return;
	slot = wait_my_slot();
	if (slot->ticket == 0)
		return;
	LWLockAcquire(&wait_shared->lock, LW_EXCLUSIVE);
	if (slot->kind == DL_WAIT_LEASE)
		/* the next in line may be first now */
		wake_oldest(slot->kind, slot->key, slot->dbid, 1, slot->ticket);
	else
	{
		/* each for its own job: the one woken for, the one due later */
		int			n = (slot->woken || wait_taken) ? 1 : 0;

		if (slot->known_due != 0 && !wait_due_known_elsewhere(slot))
			n++;
		if (n > 0)
			wake_oldest(slot->kind, slot->key, slot->dbid, n, slot->ticket);
	}
	slot->ticket = 0;
	slot->known_due = 0;
	slot->woken = false;
	wait_taken = false;
	LWLockRelease(&wait_shared->lock);
}

/*
 * Wake the count oldest waiters of kind and key in dbid that are not woken
 * already and whose tickets come after after (0: any).  For a lease, the
 * first in its line only (wait.c), if it is not woken already; for a
 * session, the lease waiters whose holder it was.  Caller holds the lock.
 */
static void
wake_oldest(int kind, uint64 key, Oid dbid, int64 count, uint64 after)
{
	while (count-- > 0)
	{
		int			best = -1;

		for (int i = 0; i < wait_shared->nslots; i++)
		{
			WaitSlot   *s = &wait_shared->slots[i];

			if (s->ticket <= after || s->dbid != dbid)
				continue;
			if (kind == DL_WAIT_SESSION)
			{
				if (s->kind == DL_WAIT_LEASE && s->session_key == key &&
					!s->woken)
				{
					s->woken = true;
					SetLatch(&GetPGProcByNumber(i)->procLatch);
				}
				continue;
			}
			if (s->kind != kind || s->key != key ||
				(kind == DL_WAIT_QUEUE && s->woken))
				continue;
			if (best < 0 || s->ticket < wait_shared->slots[best].ticket)
				best = i;
		}
		if (best < 0 || wait_shared->slots[best].woken)
			return;
		wait_shared->slots[best].woken = true;
		SetLatch(&GetPGProcByNumber(best)->procLatch);
		if (kind != DL_WAIT_QUEUE)
			return;
	}
}

/*
 * Act on the notes that the end of a transaction (or subtransaction) makes
 * true: at commit those of work made available, at an abort those of work
 * a rolled-back claim gives back.  Caller holds the lock.
 */
static void
wake_pending(bool commit, int abort_level)
{
	ListCell   *lc;

	foreach(lc, wait_pending)
	{
		PendingWake *pw = (PendingWake *) lfirst(lc);

		if (commit ? pw->abort_level == 0 :
			pw->abort_level != 0 && pw->abort_level >= abort_level)
			wake_oldest(pw->kind, pw->key, MyDatabaseId, pw->count, 0);
	}
}

static void
wake_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
			/* first, so that a woken claim starts where the jobs are */
			dl_position_at_end(event == XACT_EVENT_COMMIT);
			if (wait_pending == NIL || wait_shared == NULL)
				break;
			LWLockAcquire(&wait_shared->lock, LW_EXCLUSIVE);
			wake_pending(event == XACT_EVENT_COMMIT, 1);
			LWLockRelease(&wait_shared->lock);
			break;
		case XACT_EVENT_PREPARE:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
			break;
		default:
			return;
	}
	/* the list lived in TopTransactionContext, which is going away */
	wait_pending = NIL;
}

/*
 * A subtransaction's abort gives back at once what its claims took (the
 * rows are claimable as soon as it has aborted); what it made available
 * is never committed, and waking for it only costs a look.  Its commit
 * hands its claims' notes to its parent.
 */
static void
wake_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					  SubTransactionId parentSubid, void *arg)
{
	ListCell   *lc;
	int			level = GetCurrentTransactionNestLevel();

	if (wait_pending == NIL || wait_shared == NULL)
		return;
	if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		/* its claims are now its parent's, to give back if that aborts */
		foreach(lc, wait_pending)
		{
			PendingWake *pw = (PendingWake *) lfirst(lc);

			if (pw->abort_level >= level)
				pw->abort_level = level - 1;
		}
		return;
	}
	if (event != SUBXACT_EVENT_ABORT_SUB)
		return;
	dl_position_at_subabort();
	LWLockAcquire(&wait_shared->lock, LW_EXCLUSIVE);
	wake_pending(false, level);
	LWLockRelease(&wait_shared->lock);
	foreach(lc, wait_pending)
	{
		PendingWake *pw = (PendingWake *) lfirst(lc);

		if (pw->abort_level >= level)
			wait_pending = foreach_delete_current(wait_pending, lc);
	}
}

/*
 * Note that this transaction makes count jobs of owner's queue name, a
 * lease of lock name, or the leases of session name available (kind;
 * at_abort: should it abort, as a claim's jobs are): waiters are woken
 * once it commits (or aborts).  Without the shared memory there is nobody
 * to wake, and the key (a digest) is not even computed.
 */
void
dl_wake_at_end(DistlockWaitKind kind, Oid owner, Datum name, int64 count,
			   bool at_abort)
{
	ListCell   *lc;
	PendingWake *pw;
	MemoryContext old;
	int			abort_level = at_abort ? GetCurrentTransactionNestLevel() : 0;
	uint64		key;

	if (count <= 0 || !dl_wake_available())
		return;
	key = dl_wait_key_of(kind, owner, name);
	if (!wait_callbacks_registered)
	{
		RegisterXactCallback(wake_xact_callback, NULL);
		RegisterSubXactCallback(wake_subxact_callback, NULL);
		wait_callbacks_registered = true;
	}
	foreach(lc, wait_pending)
	{
		pw = (PendingWake *) lfirst(lc);
		if (pw->kind == kind && pw->key == key &&
			pw->abort_level == abort_level)
		{
			pw->count += count;
			return;
		}
	}
	old = MemoryContextSwitchTo(TopTransactionContext);
	pw = palloc(sizeof(PendingWake));
	pw->kind = kind;
	pw->key = key;
	pw->count = count;
	pw->abort_level = abort_level;
	wait_pending = lappend(wait_pending, pw);
	MemoryContextSwitchTo(old);
}

/*
 * Sleep until the latch is set, until the server clock reaches until, or,
 * without the shared memory, for at most distlock.wait_poll_interval.
 * Returns at once on a cancel, a statement timeout or a shutdown (by
 * raising their errors), and ends the backend if its client has gone: a
 * sleeping call reads nothing from the client, so it watches the socket.
 */
void
dl_wait_sleep(TimestampTz until)
{
	long		timeout_ms;
	int			events = WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH;
	pgsocket	sock = PGINVALID_SOCKET;
	int			rc;

	timeout_ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), until);
	/* round up, so as not to wake just before until and look for nothing */
	if (timeout_ms < 1)
		timeout_ms = 1;
	if (wait_shared == NULL && timeout_ms > dl_wait_poll_interval)
		timeout_ms = dl_wait_poll_interval;
	/* a wake-up whose latch was reset since (by a lock or I/O wait) */
	if (wait_woken())
		return;
	/* the caller looks again and sleeps on; the kernel takes an int */
	if (timeout_ms > 3600 * 1000L)
		timeout_ms = 3600 * 1000L;
	if (MyProcPort != NULL && WaitEventSetCanReportClosed())
	{
		events |= WL_SOCKET_CLOSED;
		sock = MyProcPort->sock;
	}

	rc = WaitLatchOrSocket(MyLatch, events, sock, timeout_ms,
						   PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	if (rc & WL_SOCKET_CLOSED)
	{
		/* as core does: nothing more goes to the closed socket */
		whereToSendOutput = DestNone;
		ereport(FATAL,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("connection to client lost")));
	}
	CHECK_FOR_INTERRUPTS();
}
