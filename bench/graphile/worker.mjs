// bench/graphile/worker.mjs -- graphile-worker's own worker pool, as the
// peer of distlock's waiting claim in bench/wake.py.
//
// Runs graphile-worker's run() with the given concurrency and its defaults
// otherwise: one LISTEN connection whose notifications wake the idle
// workers, and a poll every pollInterval (2 s) for jobs that become due.
// The task "wake" does no work; it prints "start <seq> <ns>" when its
// handler is entered, <seq> from the job's payload and <ns> the
// CLOCK_MONOTONIC time (process.hrtime, the clock of Python's
// time.monotonic_ns), so that the harness can set it against the time the
// producer's enqueue committed.  "ready" is printed once the LISTEN
// connection is up.  Stops on SIGTERM or when stdin closes.
//
//	node worker.mjs MODULES_DIR CONCURRENCY
//
// MODULES_DIR is the node_modules of bench/graphile/install.sh; the
// connection string is made from the libpq environment (PGHOST, PGPORT,
// PGUSER, PGDATABASE).

import { loadGraphile, out, runUntilStopped, startPool } from "./common.mjs";

const [modules, concurrencyArg] = process.argv.slice(2);
const concurrency = Number(concurrencyArg || 16);
const graphile = await loadGraphile(modules);

const runner = await startPool(graphile, concurrency, {
	taskList: {
		wake: async (payload) => {
			out(`start ${payload.seq} ${process.hrtime.bigint()}`);
		},
	},
});

await runUntilStopped(runner);
