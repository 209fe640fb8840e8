/*-------------------------------------------------------------------------
 *
 * distlock.c
 *		Module initialisation for distlock.
 *
 * distlock needs nothing from shared_preload_libraries: every function works
 * right after CREATE EXTENSION, with all state in WAL-logged tables.  The
 * SQL-callable functions live in one file per concern: lease.c (locks and
 * fencing), session.c (sessions and reaping), queue.c (jobs), throttle.c
 * (rate limits), advisory.c (helpers for advisory-lock users).
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/distlock.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/guc.h"

PG_MODULE_MAGIC;

PGDLLEXPORT void _PG_init(void);

/*
 * Module load callback.  distlock defines no settings yet; reserving the
 * prefix makes a misspelt "distlock.*" setting an error instead of a silent
 * placeholder.
 */
void
_PG_init(void)
{
	MarkGUCPrefixReserved("distlock");
}
