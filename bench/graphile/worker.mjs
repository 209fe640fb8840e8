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

import { EventEmitter } from "node:events";
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [modules, concurrencyArg] = process.argv.slice(2);
const concurrency = Number(concurrencyArg || 16);
const require = createRequire(join(modules, "x.js"));
const graphile = await import(pathToFileURL(require.resolve("graphile-worker")).href);

const { run, Logger } = graphile;
const env = process.env;
const connectionString =
	`postgres://${encodeURIComponent(env.PGUSER || "postgres")}@${env.PGHOST || "127.0.0.1"}` +
	`:${env.PGPORT || 5432}/${encodeURIComponent(env.PGDATABASE || "postgres")}`;
const out = (line) => process.stdout.write(line + "\n");

// warnings and errors only, to stderr
const logger = new Logger(() => (level, message) => {
	if (level === "error" || level === "warning")
		console.error(`graphile-worker ${level}: ${message}`);
});
const events = new EventEmitter();
events.on("pool:listen:success", () => out("ready"));

const runner = await run({
	connectionString,
	// a pool as large as the workers and the LISTEN connection need
	maxPoolSize: concurrency + 2,
	concurrency,
	noHandleSignals: true,
	logger,
	events,
	taskList: {
		wake: async (payload) => {
			out(`start ${payload.seq} ${process.hrtime.bigint()}`);
		},
	},
});

let stopping = false;
const stop = async () => {
	if (stopping)
		return;
	stopping = true;
	await runner.stop();
	process.exit(0);
};
process.on("SIGTERM", stop);
process.stdin.on("end", stop);
process.stdin.resume();
await runner.promise;
