/*-------------------------------------------------------------------------
 *
 * throttle.c
 *		Rate limits: throttle, throttle_status.
 *
 * A throttle is a token bucket: it holds at most burst permits, a grant
 * spends one, and one comes back per every.  Its row in distlock.throttles
 * keeps the permits left at an instant, (permits, refilled_at), so that at
 * time now the bucket holds
 *
 *		available = min(burst, permits + floor((now - refilled_at) / every))
 *
 * A grant stores available - 1 and moves refilled_at on by the whole periods
 * it counted, or to now if the bucket was full, since a full bucket gains
 * nothing while it waits.  Every quantity is a whole number of permits or
 * microseconds; there are no fractional permits to round.
 *
 * Why a token bucket and not GCRA: both grant at exactly the same instants.
 * With T = refilled_at + (burst - permits) * every, the rule above is GCRA's
 * "grant at now iff T' - now <= burst * every, where T' = max(T, now) +
 * every".  But GCRA stores T, which lies up to burst * every ahead of now
 * (a million periods of 366 days is past the end of timestamptz), and under
 * a later call with another every it rescales the permits already spent.
 * The bucket's state never lies ahead of now, and it means the same under
 * any every and burst: a later call with other values keeps the permits left
 * (but never more than its burst) and refills them at its every from
 * refilled_at.  Each call judges with its own every and burst; the row
 * records those of the last grant, for throttle_status().
 *
 * The bound: after a grant at t_i, T >= t_i + every, and each later grant
 * adds at least every to T, so the condition of a later grant at t_j gives
 * j - i + 1 <= burst + (t_j - t_i) / every.  No stretch of time of length L
 * sees more than burst + L / every grants for a name, however many callers
 * there are, provided the decisions are made one after another (below) and
 * the callers agree on every and burst.
 *
 * A throttle belongs to a role: its row is keyed by (owner, name), owner
 * being the calling role unless the call names another whose privileges
 * the caller has (a group role shared by the processes that share the
 * limit).  The owner is checked before any row is read, so a role can only
 * ever wait for, or hold up, callers with the owner's privileges, and the
 * same name means a different bucket to each role.
 *
 * Concurrency: a grant locks the row FOR UPDATE, then reads the clock, then
 * decides (see distlock.h), so concurrent callers decide one after another,
 * each on what its predecessor committed.  The first call for a name inserts
 * the row with ON CONFLICT DO NOTHING; the loser of that race waits for the
 * winner, then locks the winner's row and decides on it.
 *
 * A refusal writes nothing: never a row version, and usually not even a row
 * lock or a transaction id.  Before it locks the row, throttle() reads the
 * committed row and then the clock, and refuses at once if that row has no
 * permit at that instant.  This is the refusal a locked decision would make:
 * a grant never leaves a bucket with more permits at a given instant than
 * it had before (for callers that agree on every and burst), so no version
 * committed since the one read can have a permit at that instant either.
 * Only a call that saw a permit, and lost it to another caller while it
 * waited for the row lock, refuses holding the lock (a row-lock record in
 * WAL, still no row version); and on a name's first use, callers racing to
 * create the row may each begin an insert that ON CONFLICT then discards.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/throttle.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include "distlock.h"

PG_FUNCTION_INFO_V1(distlock_throttle);
PG_FUNCTION_INFO_V1(distlock_throttle_status);

/* Columns of peek_stmt and lock_stmt. */
#define THROTTLE_COL_PERMITS	1
#define THROTTLE_COL_REFILLED	2
#define THROTTLE_COL_EVERY		3
#define THROTTLE_COL_BURST		4

/*
 * The statements name the predicate of throttles_owner_name_idx (the owner
 * is never role 0, '-', here), so that their generic plans can use it.
 */
#define THROTTLE_KEY "owner = $2 AND name = $1 AND owner <> 0::oid"

/* The committed row of throttle ($2, $1), read without locking it. */
static DistlockStmt peek_stmt = {
	"SELECT permits, refilled_at, every, burst FROM distlock.throttles"
	" WHERE " THROTTLE_KEY,
	2, {TEXTOID, REGROLEOID}
};

static DistlockStmt lock_stmt = {
	"SELECT permits, refilled_at, every, burst FROM distlock.throttles"
	" WHERE " THROTTLE_KEY " FOR UPDATE",
	2, {TEXTOID, REGROLEOID}
};

/* First use of a name: a full bucket, less the permit this call takes. */
static DistlockStmt insert_stmt = {
	"INSERT INTO distlock.throttles (owner, name, every, burst, permits,"
	" refilled_at, granted_at, created_by)"
	" VALUES ($6, $1, $2, $3, $3 - 1, $4, $4, $5)"
	" ON CONFLICT (owner, name) WHERE owner <> 0::oid DO NOTHING",
	6, {TEXTOID, INTERVALOID, INT4OID, TIMESTAMPTZOID, REGROLEOID, REGROLEOID}
};

static DistlockStmt grant_stmt = {
	"UPDATE distlock.throttles SET every = $2, burst = $3, permits = $4,"
	" refilled_at = $5, granted_at = $6, created_by = $7"
	" WHERE owner = $8 AND name = $1 AND owner <> 0::oid",
	8, {TEXTOID, INTERVALOID, INT4OID, INT4OID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, REGROLEOID, REGROLEOID}
};

/* A throttle row as read; every points into SPI memory. */
typedef struct ThrottleRow
{
	int32		permits;
	TimestampTz refilled_at;
	Interval   *every;
	int32		burst;
} ThrottleRow;

/*
 * Run stmt on the row of owner's throttle name, in the call's snapshot or
 * (latest) as last committed; returns the number of rows.
 */
static uint64
throttle_exec(DistlockStmt *stmt, text *name, Oid owner, bool latest)
{
	Datum		values[2] = {PointerGetDatum(name), ObjectIdGetDatum(owner)};

	return latest ? dl_exec_latest(stmt, values, NULL) :
		dl_exec(stmt, values, NULL, 1);
}

/*
 * Read the row of owner's throttle name with stmt into *row; false if there
 * is none.
 */
static bool
throttle_read_row(DistlockStmt *stmt, text *name, Oid owner, ThrottleRow *row)
{
	bool		isnull;

	if (throttle_exec(stmt, name, owner, false) == 0)
		return false;

	row->permits = DatumGetInt32(dl_getattr(0, THROTTLE_COL_PERMITS, &isnull));
	row->refilled_at =
		DatumGetTimestampTz(dl_getattr(0, THROTTLE_COL_REFILLED, &isnull));
	row->every = DatumGetIntervalP(dl_getattr(0, THROTTLE_COL_EVERY, &isnull));
	row->burst = DatumGetInt32(dl_getattr(0, THROTTLE_COL_BURST, &isnull));
	/* throttle() stores only what it checked; a row added by hand may not */
	if (TIMESTAMP_NOT_FINITE(row->refilled_at) || row->permits < 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("throttle \"%s\" has a refilled_at or permits that no grant leaves",
						text_to_cstring(name))));
	return true;
}

/*
 * The permits the bucket in *row holds at now, refilling one per every_us
 * up to burst.  *refilled_at gets the refill instant that goes with that
 * count, which a grant at now stores.
 */
static int32
throttle_available(ThrottleRow *row, int64 every_us, int32 burst,
				   TimestampTz now, TimestampTz *refilled_at)
{
	int64		periods = 0;

	/* a clock that went back refills nothing */
	if (now > row->refilled_at)
		periods = (now - row->refilled_at) / every_us;

	if (row->permits + periods >= burst)
	{
		*refilled_at = now;
		return burst;
	}
	*refilled_at = row->refilled_at + periods * every_us;
	return row->permits + (int32) periods;
}

/*
 * Take a permit of owner's throttle name under its row lock, inserting the
 * row on first use: true if one was available.
 */
static bool
throttle_take(text *name, Oid owner, Interval *every, int64 every_us,
			  int32 burst, Oid caller)
{
	bool		limit_locked = false;

	for (;;)
	{
		ThrottleRow row;
		TimestampTz now;
		TimestampTz refilled_at;
		int32		available;

		if (!throttle_read_row(&lock_stmt, name, owner, &row))
		{
			Datum		values[6];

			/*
			 * First use.  The owner's creation of the throttle we waited
			 * for under the limit's lock may have been this one: read
			 * again before counting it as one more.
			 */
			if (!limit_locked)
			{
				dl_limit_lock(DL_LIMIT_THROTTLES, owner);
				limit_locked = true;
				continue;
			}
			/*
			 * Lose a race and we lock the winner's row.  At REPEATABLE
			 * READ and SERIALIZABLE a row committed since the snapshot is
			 * not one more either: the insert then fails with 40001.
			 */
			if (throttle_exec(&peek_stmt, name, owner, true) == 0)
				dl_limit_count(DL_LIMIT_THROTTLES, owner);
			now = GetCurrentTimestamp();
			values[0] = PointerGetDatum(name);
			values[1] = IntervalPGetDatum(every);
			values[2] = Int32GetDatum(burst);
			values[3] = TimestampTzGetDatum(now);
			values[4] = ObjectIdGetDatum(caller);
			values[5] = ObjectIdGetDatum(owner);
			if (dl_exec(&insert_stmt, values, NULL, 0) == 1)
				return true;
			CHECK_FOR_INTERRUPTS();
			continue;
		}

		now = GetCurrentTimestamp();
		available = throttle_available(&row, every_us, burst, now,
									   &refilled_at);
		if (available > 0)
		{
			Datum		values[8];

			values[0] = PointerGetDatum(name);
			values[1] = IntervalPGetDatum(every);
			values[2] = Int32GetDatum(burst);
			values[3] = Int32GetDatum(available - 1);
			values[4] = TimestampTzGetDatum(refilled_at);
			values[5] = TimestampTzGetDatum(now);
			values[6] = ObjectIdGetDatum(caller);
			values[7] = ObjectIdGetDatum(owner);
			dl_exec(&grant_stmt, values, NULL, 0);
		}
		return available > 0;
	}
}

/*
 * The role whose throttle a call draws on: the owner argument argno, or the
 * calling role.  A role that does not exist raises 42704, one the caller
 * may not act for 42501, before any row is read.
 */
static Oid
throttle_owner(FunctionCallInfo fcinfo, int argno, DistlockCall *call,
			   text *name)
{
	Oid			owner = dl_arg_owner(fcinfo, argno, call);

	if (owner != call->caller)
		dl_check_access(call, owner, DL_OBJECT_THROTTLE,
						text_to_cstring(name));
	return owner;
}

/*
 * throttle(name text, every interval, burst integer DEFAULT 1,
 *			owner regrole DEFAULT NULL) RETURNS boolean
 *
 * Spend one permit of owner's (NULL: the current role's) throttle name and
 * return true, or return false, changing nothing, if none is left.  The throttle holds at most burst
 * permits and gets one back per every, so that no stretch of time of
 * length L sees more than burst + L / every grants.  every must be positive
 * and at most 366 days, burst between 1 and DISTLOCK_MAX_BURST.
 */
Datum
distlock_throttle(PG_FUNCTION_ARGS)
{
	text	   *name = dl_arg_name(fcinfo, 0, "throttle name");
	Interval   *every = dl_arg_interval(fcinfo, 1, "every", false);
	int32		burst = dl_arg_int_range(fcinfo, 2, "burst", 1,
										 DISTLOCK_MAX_BURST);
	int64		every_us = dl_interval_usecs(every);
	DistlockCall call;
	ThrottleRow row;
	TimestampTz refilled_at;
	bool		granted;
	Oid			owner;

	dl_enter(&call, "distlock.throttle()", true);
	owner = throttle_owner(fcinfo, 3, &call, name);

	/* refuse on the committed row if it has no permit; see header comment */
	if (throttle_read_row(&peek_stmt, name, owner, &row) &&
		throttle_available(&row, every_us, burst, GetCurrentTimestamp(),
						   &refilled_at) == 0)
		granted = false;
	else
		granted = throttle_take(name, owner, every, every_us, burst,
								call.caller);

	dl_leave(&call);

	PG_RETURN_BOOL(granted);
}

/*
 * throttle_status(name text, owner regrole DEFAULT NULL,
 *				   OUT available integer, OUT next_in interval,
 *				   OUT every interval, OUT burst integer) RETURNS record
 *
 * What owner's (NULL: the current role's) throttle name holds now, judged with the every and burst of its last
 * grant: the permits a call could take, and the time until one is there
 * (zero while one is).  42704 if the name was never used.  Reads the row
 * as the caller's snapshot shows it (at READ COMMITTED the latest
 * committed), without locking it.
 */
Datum
distlock_throttle_status(PG_FUNCTION_ARGS)
{
	text	   *name = dl_arg_name(fcinfo, 0, "throttle name");
	TupleDesc	tupdesc;
	DistlockCall call;
	ThrottleRow row;
	TimestampTz now;
	TimestampTz refilled_at;
	int64		every_us;
	int32		available;
	Interval   *every;
	Interval   *next_in;
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	dl_enter(&call, "distlock.throttle_status()", false);
	if (!throttle_read_row(&peek_stmt, name,
						   throttle_owner(fcinfo, 1, &call, name), &row))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("throttle \"%s\" does not exist",
						text_to_cstring(name))));
	now = GetCurrentTimestamp();
	every_us = dl_interval_usecs(row.every);
	/* as throttle_read_row() */
	if (every_us <= 0 || row.burst < 1)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("throttle \"%s\" has an every or burst that is not positive",
						text_to_cstring(name))));
	available = throttle_available(&row, every_us, row.burst, now,
								   &refilled_at);
	every = (Interval *) SPI_palloc(sizeof(Interval));
	memcpy(every, row.every, sizeof(Interval));
	dl_leave(&call);

	next_in = (Interval *) palloc0(sizeof(Interval));
	if (available == 0)
		next_in->time = refilled_at + every_us - now;

	values[0] = Int32GetDatum(available);
	values[1] = IntervalPGetDatum(next_in);
	values[2] = IntervalPGetDatum(every);
	values[3] = Int32GetDatum(row.burst);

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc),
													  values, nulls)));
}
