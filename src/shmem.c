/*-------------------------------------------------------------------------
 *
 * shmem.c
 *		distlock's regions of the server's shared memory, when preloaded.
 *
 * Each concern that keeps state in shared memory (wake.c's waiters,
 * position.c's claim positions, beat.c's heartbeats, worker.c's
 * background workers) names its region here from _PG_init(); one pair of
 * hooks asks for all of them and attaches every backend to them.  On 17
 * and later the same regions can come from the DSM registry instead
 * (dl_attach_named_segment(), compat.h), made on first use.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  src/shmem.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

#include "distlock.h"

#define MAX_REGIONS	8

static DlShmemRegion regions[MAX_REGIONS];
static int	nregions = 0;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void
shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	for (int i = 0; i < nregions; i++)
		RequestAddinShmemSpace(regions[i].size());
}

static void
shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	for (int i = 0; i < nregions; i++)
	{
		bool		found;

		*regions[i].ptr = ShmemInitStruct(regions[i].name, regions[i].size(),
										  &found);
		if (!found)
			regions[i].init(*regions[i].ptr);
	}
	LWLockRelease(AddinShmemInitLock);
	for (int i = 0; i < nregions; i++)
	{
		if (regions[i].attached)
			regions[i].attached(*regions[i].ptr);
	}
}

/*
 * Ask for region while shared_preload_libraries are loaded: the size is
 * asked for when the server has settled its settings, and each backend
 * finds *region->ptr set once attached.
 */
void
dl_shmem_region(const DlShmemRegion *region)
{
	Assert(process_shared_preload_libraries_in_progress);
	if (nregions == MAX_REGIONS)
		elog(ERROR, "too many distlock shared memory regions");
	if (nregions == 0)
	{
		prev_shmem_request_hook = shmem_request_hook;
		shmem_request_hook = shmem_request;
		prev_shmem_startup_hook = shmem_startup_hook;
		shmem_startup_hook = shmem_startup;
	}
	regions[nregions++] = *region;
}
