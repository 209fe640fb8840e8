/*-------------------------------------------------------------------------
 *
 * check.c
 *		Argument checks shared by every API function.
 *
 * The API functions are not STRICT.  A NULL where a value is needed raises
 * 22004, an empty name or a bad interval 22023, an over-long name 22001, so
 * that no call ever answers a mistake with a NULL that could pass for "no".
 * All checks run before the call touches any table.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/check.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"

#include "distlock.h"

/* Raise 22004 if argument argno, called what, is NULL. */
void
dl_arg_not_null(FunctionCallInfo fcinfo, int argno, const char *what)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s cannot be null", what)));
}

/*
 * A name that may be NULL (returned as NULL) but otherwise must be 1 to
 * DISTLOCK_MAX_NAME_CHARS characters.
 */
text *
dl_arg_optional_name(FunctionCallInfo fcinfo, int argno, const char *what)
{
	text	   *t;
	int			len;
	int			chars;

	if (PG_ARGISNULL(argno))
		return NULL;

	t = PG_GETARG_TEXT_PP(argno);
	len = VARSIZE_ANY_EXHDR(t);
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s cannot be empty", what)));

	chars = pg_mbstrlen_with_len(VARDATA_ANY(t), len);
	if (chars > DISTLOCK_MAX_NAME_CHARS)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("%s is too long", what),
				 errdetail("It has %d characters; the limit is %d.",
						   chars, DISTLOCK_MAX_NAME_CHARS)));
	return t;
}

/* A name that must be given: 1 to DISTLOCK_MAX_NAME_CHARS characters. */
text *
dl_arg_name(FunctionCallInfo fcinfo, int argno, const char *what)
{
	dl_arg_not_null(fcinfo, argno, what);
	return dl_arg_optional_name(fcinfo, argno, what);
}

/* An integer that must be given and lie in [min, max]. */
int32
dl_arg_int_range(FunctionCallInfo fcinfo, int argno, const char *what,
				 int32 min, int32 max)
{
	int32		v;

	dl_arg_not_null(fcinfo, argno, what);
	v = PG_GETARG_INT32(argno);
	if (v < min || v > max)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be between %d and %d", what, min, max)));
	return v;
}

/*
 * The length of span in microseconds, a day counting as 24 hours and a month
 * as 30 days, as in interval comparison.  A double, so that no interval can
 * overflow the sum.
 */
static double
check_interval_usecs(const Interval *span)
{
	return (double) span->time +
		(double) span->day * USECS_PER_DAY +
		(double) span->month * DAYS_PER_MONTH * USECS_PER_DAY;
}

/*
 * An interval that must be given, positive (or zero if allow_zero) and at
 * most DISTLOCK_MAX_INTERVAL_USECS.  It is judged twice: by its length with
 * months of 30 days, as in interval comparison and as rates use it
 * (dl_interval_usecs()), and by where it lands on the calendar from now,
 * as expiries are computed (dl_add_interval()).  Parts that mix signs can
 * make the two disagree ('120000 months -3599999 days' is one day long by
 * the first rule and 143 years by the second), so each part alone must be
 * within the limit too, which also keeps the calendar sum in range; and
 * months must not be of the other sign than days or time: '-12 months 366
 * days' is 6 days long by the first rule and one by the second, and a
 * session's heartbeats paced by the one would miss the expiry set by the
 * other.  (Days and time may mix, '1 day -1 hour': the two rules differ
 * by a DST change at most.)
 */
Interval *
dl_arg_interval(FunctionCallInfo fcinfo, int argno, const char *what,
				bool allow_zero)
{
	Interval   *span;
	double		usecs;
	TimestampTz now;
	double		landing;

	dl_arg_not_null(fcinfo, argno, what);
	span = PG_GETARG_INTERVAL_P(argno);
	usecs = check_interval_usecs(span);

	if (span->month > 12 || span->month < -12 ||
		span->day > 366 || span->day < -366 ||
		span->time > DISTLOCK_MAX_INTERVAL_USECS ||
		span->time < -DISTLOCK_MAX_INTERVAL_USECS ||
		usecs > (double) DISTLOCK_MAX_INTERVAL_USECS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not exceed 366 days", what)));
	if ((span->month > 0 && (span->day < 0 || span->time < 0)) ||
		(span->month < 0 && (span->day > 0 || span->time > 0)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not mix months with days or time of the other sign",
						what)));
	now = GetCurrentTimestamp();
	landing = (double) (dl_add_interval(now, span) - now);
	if ((usecs < 0 || landing < 0) && allow_zero)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be zero or positive", what)));
	if ((usecs <= 0 || landing <= 0) && !allow_zero)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be positive", what)));
	if (landing > (double) DISTLOCK_MAX_INTERVAL_USECS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not exceed 366 days", what)));
	return span;
}

/*
 * The fixed length in microseconds of an interval that dl_arg_interval()
 * accepted without allow_zero: the sum it checked, so at least 1 and at most
 * DISTLOCK_MAX_INTERVAL_USECS.  For rates, where a "day" must not stretch
 * over a DST change.
 */
int64
dl_interval_usecs(const Interval *span)
{
	return (int64) check_interval_usecs(span);
}

/* ts + span, with the calendar rules of timestamptz + interval. */
TimestampTz
dl_add_interval(TimestampTz ts, Interval *span)
{
	return DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
												   TimestampTzGetDatum(ts),
												   PointerGetDatum(span)));
}
