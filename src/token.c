/*-------------------------------------------------------------------------
 *
 * token.c
 *		Fencing tokens: their layout, their epochs, their durability.
 *
 * A token is epoch * 2^40 + n.  Tokens come from distlock.token_seq (see
 * lease.c for why a sequence, drawn while the lock row is locked), and a
 * token drawn once is never drawn again on this server, even after a crash
 * (dl_token_drawn()).  A failover is another matter: with asynchronous
 * replication, grants the old primary made after its standby last heard
 * from it are lost, sequence advances included, and the promoted standby
 * would hand out those tokens again to other owners.  So the epoch is tied
 * to what promotion is sure to raise, the timeline:
 *
 *		epoch = base + timeline - 1
 *
 * and before a backend draws its first token on a timeline it makes sure
 * the sequence stands at epoch * 2^40 or above (dl_token_prepare()).  A
 * promotion (pg_ctl promote, pg_promote(), what HA managers run) starts a
 * timeline higher than every timeline in the history files it can see, so
 * the first token after it is larger than every token granted before it in
 * the cluster's history, lost to lag or not.  Two limits, both PostgreSQL's
 * own: a standby started without standby.signal does crash recovery and
 * stays on its timeline, so it is no promotion; and a standby that never
 * saw the history file of a timeline another standby was promoted to (no
 * shared WAL archive, and the other one died before it followed) may pick
 * the same timeline again.  On timeline 1 with base 0 the epoch is 0: a
 * cluster that never failed over hands out 1, 2, 3...
 *
 * base starts at 0 and lives in distlock.token_epoch, one row with the
 * system identifier of the cluster it was set on.  A new cluster starts
 * again at timeline 1 while the sequence, restored by pg_dump or carried by
 * pg_upgrade, may already be in a later epoch; timeline arithmetic alone
 * would then never move past it, and a failover of the new cluster could
 * hand out again what its lost grants had.  So when the table holds no
 * row naming this cluster (pg_dump and pg_upgrade carry the old row; a
 * base backup and its standbys share the identifier), grants are refused
 * until maintain() has rebased and committed: base becomes
 * the epoch after every epoch the restore shows, E + 1 for a sequence in
 * epoch E (a dump of a server that went on granting carries a sequence
 * below what it granted since; token_rebase_on()), and once that has
 * committed, the timeline's epoch E + timeline applies, with every later
 * timeline's above it.  Should
 * the rebase be lost to a failover, so was everything after it in the WAL:
 * the promoted server's copy of the sequence is still in E (only grants
 * move it, and none came before the rebase committed), so it rebases on
 * E + 1 too, on a higher timeline, and lands above every epoch the old
 * primary used after its rebase.  Each restore into a new
 * cluster on timeline t thus spends t epochs.  A dump restored into
 * another database of the same cluster leaves rows naming this cluster
 * only, and the larger base serves.
 *
 * The same goes for a sequence past its timeline's epoch: 2^40 (about
 * 10^12) grants on one timeline, a setval() by hand, or a restore whose
 * SEQUENCE SET (pg_restore's last step) came after the rebase: the grant
 * that draws such a token is refused (54000) rather than leave a later
 * timeline to hand it out again, and maintain() rebases on the sequence's
 * epoch.  A failover in the middle of a restore that is not one
 * transaction (pg_restore --single-transaction) can still find a standby
 * with part of it; that is not covered.
 * Tokens stay below 2^53, exact in JavaScript numbers and JSON doubles,
 * while the epoch is below 8192 (not enforced).  The last epoch, 2^23 - 1
 * (the largest whose tokens fit in a bigint), has none after it: a restore
 * that shows it is never rebased, and a sequence set back in it is refused
 * without being moved on.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/token.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/relation.h"
#include "access/xlog.h"
#include "catalog/pg_sequence.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "distlock.h"

#define TOKEN_EPOCH_BITS	40
#define TOKEN_EPOCH_MAX		((INT64CONST(1) << (63 - TOKEN_EPOCH_BITS)) - 1)

/*
 * The timeline, sequence and epoch this backend last made sure of;
 * ready_epoch is -1 until then.
 */
static TimeLineID ready_timeline = 0;
static Oid	ready_seq = InvalidOid;
static int64 ready_epoch = -1;

/* The top transaction that rebased in this backend, if any. */
static TransactionId rebased_xact = InvalidTransactionId;

static DistlockStmt epoch_stmt = {
	"SELECT system_identifier, base FROM distlock.token_epoch",
	0, {InvalidOid}
};

static DistlockStmt rebase_stmt = {
	"WITH gone AS (DELETE FROM distlock.token_epoch)"
	" INSERT INTO distlock.token_epoch VALUES ($1, $2)",
	2, {INT8OID, INT8OID}
};

/*
 * What a restore brought: the largest base any row names, the largest
 * token a lock row holds, and whether the sequence is still as CREATE
 * EXTENSION made it (never drawn from nor set) while lock rows are there.
 */
static DistlockStmt restored_stmt = {
	"SELECT (SELECT coalesce(max(base), 0) FROM distlock.token_epoch),"
	" (SELECT coalesce(max(token), 0) FROM distlock.locks),"
	" NOT (SELECT is_called FROM distlock.token_seq)"
	"  AND EXISTS (SELECT FROM distlock.locks)",
	0, {InvalidOid}
};

static DistlockStmt last_stmt = {
	"SELECT last_value FROM distlock.token_seq",
	0, {InvalidOid}
};

static DistlockStmt setval_stmt = {
	"SELECT setval('distlock.token_seq', $1)",
	1, {INT8OID}
};

/*
 * Read distlock.token_epoch as committed now (a transaction snapshot from
 * before a rebase would not see it), with this transaction's own changes:
 * true if it has rows and all of them name this cluster, *base then being
 * the largest of their bases.  Two rows naming this cluster come of a dump
 * restored into another database of the same cluster: both bases were set
 * here, so the larger is right for both.
 */
static bool
token_base(int64 *base)
{
	uint64		n = dl_exec_latest(&epoch_stmt, NULL, NULL);
	uint64		i;

	*base = 0;
	for (i = 0; i < n; i++)
	{
		if ((uint64) dl_getint64(i, 1) != GetSystemIdentifier())
			return false;
		*base = Max(*base, dl_getint64(i, 2));
	}
	return n > 0;
}

static int64
token_last(void)
{
	dl_exec(&last_stmt, NULL, NULL, 0);
	return dl_getint64(0, 1);
}

/*
 * Make sure the next token drawn is in this timeline's epoch or later.
 * Called by every call that may grant, before it draws; after the first
 * call on a timeline it costs a comparison.
 *
 * No grant is made until a rebase has committed (55000), and none in the
 * rebasing transaction: on timeline t >= 2 its first grant would raise the
 * sequence to E + t - 1, a raise a rollback does not undo, so the next
 * rebase would compute E + t - 1 as its base, and a standby that never got
 * the raise would rebase on E and draw in E + t', which can be the epoch
 * the second rebase granted in.  So rebasing is dl_token_rebase()'s, in
 * maintain(), and a grant waits for its commit.
 *
 * Raising the sequence happens under a lock on distlock.token_epoch, so that
 * two backends cannot both find it below the epoch and the second set it
 * back after the first drew from it; setval() is not transactional, so the
 * lock goes at once.
 */
void
dl_token_prepare(void)
{
	const DistlockCatalog *cat = dl_catalog();
	TimeLineID	timeline;
	Oid			epochid;
	int64		base;
	int64		epoch;
	int64		floor;

	/* a call that writes is refused in recovery before it gets here */
	if (RecoveryInProgress())
		return;
	timeline = GetWALInsertionTimeLine();
	if (timeline == ready_timeline && cat->token_seq == ready_seq)
		return;
	ready_epoch = -1;

	/* installed as 1.0 and not updated yet: no epochs */
	epochid = get_relname_relid("token_epoch", cat->schema);
	if (!OidIsValid(epochid))
		return;

	if (TransactionIdIsValid(rebased_xact) &&
		TransactionIdEquals(rebased_xact, GetTopTransactionIdIfAny()))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("fencing tokens were rebased by this transaction"),
				 errdetail("No lease is granted until the rebase has committed."),
				 errhint("Run maintain() in a transaction of its own, and commit it before any grant.")));
	if (!token_base(&base))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("fencing tokens have not been rebased on this cluster"),
				 errdetail("distlock.token_epoch names another cluster, as after a restore or pg_upgrade, or nothing."),
				 errhint("Run SELECT distlock.maintain() once and commit; the background worker does when distlock is preloaded.")));

	/* base is 0 to TOKEN_EPOCH_MAX (the table's CHECK) */
	epoch = base + (int64) timeline - 1;
	if (epoch > TOKEN_EPOCH_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("fencing token epoch %lld is out of range",
						(long long) epoch),
				 errdetail("The epoch is the base %lld in distlock.token_epoch plus timeline %u minus 1.",
						   (long long) base, timeline)));
	floor = epoch << TOKEN_EPOCH_BITS;

	if (token_last() < floor)
	{
		LockRelationOid(epochid, ShareRowExclusiveLock);
		if (token_last() < floor)
		{
			Datum		value = Int64GetDatum(floor);

			dl_exec(&setval_stmt, &value, NULL, 0);
		}
		UnlockRelationOid(epochid, ShareRowExclusiveLock);
	}

	ready_timeline = timeline;
	ready_seq = cat->token_seq;
	ready_epoch = epoch;
}

/*
 * What base the table must be rebased on, or -1 if none: it holds no row
 * naming this cluster (a restore, pg_upgrade), and then the epoch after
 * every epoch the restore shows, or the sequence is past this timeline's
 * epoch (2^40 grants on one timeline; a restore's sequence that arrived
 * after the table and after a rebase), and then the sequence's.
 *
 * The epoch after: a dump of a server that went on granting while it was
 * taken, or after, carries a sequence below tokens that server handed out
 * since, for names whose rows the dump has from before (or does not have);
 * a cluster restored from it starts above all of them.  The epochs a
 * restore shows are the sequence's, the lock rows' tokens' and the bases
 * of the rows it brought: pg_restore sets sequences after every table's
 * rows, so a background worker rebases on a sequence not yet restored,
 * and the tokens and bases carry the dumped server's epoch then; but not
 * always (lock rows pruned, a server that failed over since its last
 * grant), so while the restore's lock rows are there and its sequence is
 * not yet, there is no rebase, and no grant.  (A sequence restored or set
 * below the new epoch after all is moved to the next epoch by the first
 * grant of a backend that drew before, and rebased on: dl_token_drawn().)
 */
static int64
token_rebase_on(void)
{
	static bool warned = false;
	int64		base;
	int64		last = token_last() >> TOKEN_EPOCH_BITS;
	int64		after;
	bool		isnull;

	if (token_base(&base))
		return last > base + (int64) GetWALInsertionTimeLine() - 1 ? last : -1;
	dl_exec_latest(&restored_stmt, NULL, NULL);
	if (DatumGetBool(dl_getattr(0, 3, &isnull)))
		return -1;
	after = Max(last, Max(dl_getint64(0, 1),
						  dl_getint64(0, 2) >> TOKEN_EPOCH_BITS)) + 1;
	if (after <= TOKEN_EPOCH_MAX)
		return after;

	/*
	 * The restore shows the last epoch (a base or a token set by hand).  No
	 * rebase can go past it, so grants stay refused; say why once, and let
	 * maintain() go on with the rest of its work (an error would end every
	 * pass of the background worker, and its reaping with it).
	 */
	if (!warned)
		ereport(WARNING,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("fencing tokens cannot be rebased past epoch %lld",
						(long long) TOKEN_EPOCH_MAX),
				 errdetail("The restored distlock.token_epoch, distlock.locks or distlock.token_seq is in the last epoch; no lease is granted on this cluster.")));
	warned = true;
	return -1;
}

/*
 * Rebase if need be (token_rebase_on()); true if it did.  For
 * maintain(), whose transaction commits the rebase before any grant can
 * use it (grants in the rebasing transaction are refused).  The sequence
 * is left alone (see dl_token_prepare()).  The lock on the table, to the
 * end of the transaction, makes a second rebase see the first; a rebase
 * that would wait for it is left to the next maintain(), so that a rebase
 * left open (or prepared) holds no worker up.
 */
bool
dl_token_rebase(void)
{
	Oid			epochid;
	int64		base;
	Datum		values[2];

	if (RecoveryInProgress())
		return false;
	epochid = get_relname_relid("token_epoch", dl_catalog()->schema);
	if (!OidIsValid(epochid) || token_rebase_on() < 0 ||
		!ConditionalLockRelationOid(epochid, ShareRowExclusiveLock))
		return false;
	base = token_rebase_on();
	if (base < 0)
	{
		UnlockRelationOid(epochid, ShareRowExclusiveLock);
		return false;
	}
	values[0] = Int64GetDatum((int64) GetSystemIdentifier());
	values[1] = Int64GetDatum(base);
	dl_exec_latest(&rebase_stmt, values, NULL);
	rebased_xact = GetTopTransactionId();
	ready_timeline = 0;
	return true;
}

/*
 * A grant has just drawn a token from distlock.token_seq: make sure no
 * token is ever handed out twice or out of order, before this one is
 * returned.
 *
 * The sequence must still hand out increasing values to every backend:
 * one at a time (CACHE 1: a backend's cached values would come after values
 * other backends drew later), upwards, never wrapping, and logged (an
 * unlogged sequence restarts after a crash).  Its owner could change that
 * with ALTER SEQUENCE; the grant then fails with 55000, which undoes it.
 * Checked here, where a token was drawn, so that refusals pay nothing.
 *
 * Then the WAL is flushed up to the sequence's last record, so that the
 * token is never drawn again whether or not this transaction commits and
 * whatever synchronous_commit says: nextval() logs values ahead of those
 * it hands out and flushes only at commit, and only with synchronous_commit
 * on; a crash before that would restart the sequence below a token a
 * client already holds.  The flush costs a WAL write only when nextval()
 * has just logged ahead, once every 32 tokens.  (It makes the token durable
 * here, not on a standby: that is the epoch's job.)
 */
void
dl_token_drawn(int64 token)
{
	Oid			seqid = dl_catalog()->token_seq;
	HeapTuple	tup;
	Form_pg_sequence seqform;
	bool		ok;
	Relation	seq;
	Buffer		buf;
	XLogRecPtr	lsn;

	tup = SearchSysCache1(SEQRELID, ObjectIdGetDatum(seqid));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for sequence %u", seqid);
	seqform = (Form_pg_sequence) GETSTRUCT(tup);
	ok = seqform->seqcache == 1 && seqform->seqincrement > 0 &&
		!seqform->seqcycle &&
		get_rel_persistence(seqid) == RELPERSISTENCE_PERMANENT;
	ReleaseSysCache(tup);
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("sequence \"distlock.token_seq\" cannot hand out fencing tokens in order"),
				 errdetail("Fencing tokens need a logged sequence with CACHE 1, a positive INCREMENT and NO CYCLE."),
				 errhint("Restore it with ALTER SEQUENCE distlock.token_seq SET LOGGED CACHE 1 INCREMENT 1 NO CYCLE.")));

	seq = relation_open(seqid, AccessShareLock);
	buf = ReadBuffer(seq, 0);
	lsn = BufferGetLSNAtomic(buf);
	ReleaseBuffer(buf);
	relation_close(seq, AccessShareLock);
	XLogFlush(lsn);

	/*
	 * A token below its epoch: the sequence was set back since this
	 * backend raised it (a setval() by hand, a second restore into the
	 * database), and the token may have been handed out before,
	 * as may tokens of the epoch drawn before the sequence went back.  So
	 * move the sequence to the next epoch (setval() stays, whatever becomes
	 * of this transaction) and refuse: grants then draw past their epoch,
	 * and are refused until maintain() has rebased on the sequence's.
	 */
	if (ready_epoch >= 0 && (token >> TOKEN_EPOCH_BITS) < ready_epoch)
	{
		Oid			epochid = get_relname_relid("token_epoch",
												dl_catalog()->schema);
		Datum		next;

		if (ready_epoch >= TOKEN_EPOCH_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("fencing token %lld is below its epoch %lld, the last one",
							(long long) token, (long long) ready_epoch),
					 errdetail("distlock.token_seq was set back below the epoch, as by setval() or a restore, and there is no epoch after it.")));
		next = Int64GetDatum((ready_epoch + 1) << TOKEN_EPOCH_BITS);
		LockRelationOid(epochid, ShareRowExclusiveLock);
		if (token_last() < DatumGetInt64(next))
			dl_exec(&setval_stmt, &next, NULL, 0);
		UnlockRelationOid(epochid, ShareRowExclusiveLock);
		ready_timeline = 0;
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("fencing token %lld is below its epoch %lld",
						(long long) token, (long long) ready_epoch),
				 errdetail("distlock.token_seq was set back below the epoch, as by setval() or a restore; it now stands at the next epoch."),
				 errhint("Run SELECT distlock.maintain() once and commit; the background worker does when distlock is preloaded.")));
	}

	/*
	 * A token past its epoch (2^40 tokens drawn on one timeline, or a
	 * setval() by hand) is in an epoch a later timeline will draw from
	 * again.  The base may have been raised by hand since this backend
	 * looked: look again (which may raise the sequence further, under the
	 * table's lock) before refusing.
	 */
	if (ready_epoch >= 0 && (token >> TOKEN_EPOCH_BITS) > ready_epoch)
	{
		ready_timeline = 0;
		dl_token_prepare();
		if (ready_epoch >= 0 && (token >> TOKEN_EPOCH_BITS) > ready_epoch)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("fencing token %lld is past its epoch %lld",
							(long long) token, (long long) ready_epoch),
					 errdetail("A later timeline could hand it out again."),
					 errhint("Run SELECT distlock.maintain() once and commit; the background worker does when distlock is preloaded.")));
	}
}
