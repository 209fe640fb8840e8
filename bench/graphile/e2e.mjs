// bench/graphile/e2e.mjs -- graphile-worker's own worker pool, as the peer
// of distlock's job cycle in bench/e2e.py (end-to-end throughput).
//
// Runs graphile-worker's run() with the given concurrency on a queue that
// e2e.py has filled (graphile_worker.add_jobs, task "e2e").  The task does
// no work.  MODE is one of graphile-worker's two ways of taking jobs, or
// migrate:
//
//   one      its defaults: each worker fetches one job (get_job) and
//            completes it with its own DELETE
//   batched  its local queue (preset.worker.localQueue.size = LOCAL_QUEUE,
//            default 10 x concurrency): the pool fetches and locks that many
//            jobs in one query and hands them to its workers from memory;
//            and batched completion (preset.worker.completeJobBatchDelay =
//            0): the jobs completed before a 0 ms timer fires are deleted
//            in one statement
//   migrate  installs or upgrades the graphile_worker schema, then exits
//
// "ready" is printed once the LISTEN connection is up; "handled <n>" (the
// task's calls) when it stops, on SIGTERM or when stdin closes.
//
//	node e2e.mjs MODULES_DIR CONCURRENCY MODE [LOCAL_QUEUE]

import { connectionString, loadGraphile, out, quietLogger, runUntilStopped, startPool }
	from "./common.mjs";

const [modules, concurrencyArg, mode, localQueueArg] = process.argv.slice(2);
const concurrency = Number(concurrencyArg);
const graphile = await loadGraphile(modules);

if (mode === "migrate") {
	await graphile.runMigrations({ connectionString, logger: quietLogger(graphile.Logger) });
	process.exit(0);
}
if (mode !== "one" && mode !== "batched")
	throw new Error(`unknown mode ${mode}`);

const worker = {};
if (mode === "batched") {
	worker.localQueue = { size: Number(localQueueArg || 10 * concurrency) };
	worker.completeJobBatchDelay = 0;
}
let handled = 0;
const runner = await startPool(graphile, concurrency, {
	preset: { worker },
	taskList: {
		e2e: async () => {
			handled++;
		},
	},
});

await runUntilStopped(runner, () => out(`handled ${handled}`));
