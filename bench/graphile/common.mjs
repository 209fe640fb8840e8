// bench/graphile/common.mjs -- what worker.mjs (wake.py's peer) and e2e.mjs
// (e2e.py's peer) share: graphile-worker loaded from the node_modules of
// bench/graphile/install.sh, the connection string made from the libpq
// environment (PGHOST, PGPORT, PGUSER, PGDATABASE), a logger that passes
// warnings and errors to stderr, output a line at a time, the worker pool
// (run()) that prints "ready" once its LISTEN connection is up, and the
// stop: on SIGTERM or when stdin closes, runner.stop(), then exit.

import { EventEmitter } from "node:events";
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

export async function loadGraphile(modules) {
	const require = createRequire(join(modules, "x.js"));
	return import(pathToFileURL(require.resolve("graphile-worker")).href);
}

const env = process.env;
export const connectionString =
	`postgres://${encodeURIComponent(env.PGUSER || "postgres")}@${env.PGHOST || "127.0.0.1"}` +
	`:${env.PGPORT || 5432}/${encodeURIComponent(env.PGDATABASE || "postgres")}`;

export const out = (line) => process.stdout.write(line + "\n");

export function quietLogger(Logger) {
	return new Logger(() => (level, message) => {
		if (level === "error" || level === "warning")
			console.error(`graphile-worker ${level}: ${message}`);
	});
}

// graphile-worker's run() with concurrency workers, its defaults but for
// options (taskList, preset, ...).
export async function startPool(graphile, concurrency, options) {
	const events = new EventEmitter();
	events.on("pool:listen:success", () => out("ready"));
	return graphile.run({
		connectionString,
		// a pool as large as the workers and the LISTEN connection need
		maxPoolSize: concurrency + 2,
		concurrency,
		noHandleSignals: true,
		logger: quietLogger(graphile.Logger),
		events,
		...options,
	});
}

// Runs runner until SIGTERM or the end of stdin; before exiting, after the
// runner has stopped, calls atExit.
export async function runUntilStopped(runner, atExit = () => {}) {
	let stopping = false;
	const stop = async () => {
		if (stopping)
			return;
		stopping = true;
		await runner.stop();
		atExit();
		process.exit(0);
	};
	process.on("SIGTERM", stop);
	process.stdin.on("end", stop);
	process.stdin.resume();
	await runner.promise;
}
