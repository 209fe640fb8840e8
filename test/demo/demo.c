/*-------------------------------------------------------------------------
 *
 * demo.c
 *		"make demo": worker processes coordinating through distlock alone.
 *
 * The parent enqueues N jobs and forks W worker processes.  Each worker is
 * an ordinary libpq client with its own connections and nothing shared with
 * the others but the database:
 *
 *	- it opens a distlock session with a short ttl and heartbeats it from a
 *	  thread on a second connection, as the README advises, so that a slow
 *	  job never starves the heartbeat;
 *	- every second it competes for the singleton lease "hourly-report" (the
 *	  exclusive scheduled job), and when it wins it writes a report row
 *	  under distlock.fence() in one transaction, then lets the lease run out
 *	  rather than renewing it, so that leadership changes hands;
 *	- it drains the queue with claim(), and acknowledges each job with
 *	  complete() in the same transaction that records the job's effect, so
 *	  an effect exists exactly when the acknowledgement was accepted; when
 *	  claim() finds nothing (others hold the last jobs, or a dead session
 *	  does until it expires) it waits in the server with claim_wait()
 *	  until jobs come back or its next turn at the lease, instead of
 *	  polling.
 *
 * When about a third of the jobs are done, the parent stops the worker that
 * holds the most claimed jobs and kills it with SIGKILL: no session_close,
 * no cleanup.  Its session expires a ttl after its last heartbeat, and the
 * other workers' claim() calls reap it and take its jobs.  Meanwhile the
 * parent shows progress (redrawn in place on a terminal, plain lines
 * otherwise), and at the end it checks, by SQL over distlock.jobs and the
 * demo's own tables, that every job took effect exactly once, that the
 * killed worker's jobs were re-claimed after its session expired, and that
 * no two report writers ever held the lease at the same time.  It exits 1
 * if any of that fails.
 *
 * The demo's tables live in schema distlock_demo, which is dropped and
 * recreated at the start of every run.
 *
 * Portions Copyright (c) 2026, the distlock authors
 *
 * IDENTIFICATION
 *	  test/demo/demo.c
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "libpq-fe.h"

#define LEASE_NAME		"hourly-report"
#define MAX_WORKERS		32
#define UUID_LEN		37		/* 36 characters and a terminator */
#define LEASE_TRY_MS	1000	/* how often a worker competes for the lease */
#define IDLE_WAIT_MS	100		/* shortest wait in the server for more jobs */

/* Command-line settings, shared by the parent and the workers. */
typedef struct DemoOptions
{
	const char *conninfo;		/* NULL: libpq's PG* environment */
	int			workers;		/* -w */
	int			jobs;			/* -n */
	int			batch;			/* -b: max_jobs per claim() */
	int			work_ms;		/* -m: simulated work per job */
	int			session_ttl;	/* -s: seconds */
	int			lease_ttl;		/* -l: seconds */
	int			timeout;		/* -T: seconds before the parent gives up */
	char		queue[64];		/* this run's queue name, chosen by the server */
} DemoOptions;

/* What the parent knows about one worker process. */
typedef struct WorkerProc
{
	pid_t		pid;
	bool		exited;
	int			status;			/* from waitpid() */
	bool		killed;			/* the demo's victim */
	long		done;			/* jobs whose effect it recorded */
	bool		live;			/* it has a live session */
	long		holding;		/* jobs it holds claimed right now */
} WorkerProc;

/* The heartbeat thread's view of its worker's session. */
typedef struct Heartbeat
{
	pthread_mutex_t mutex;
	pthread_cond_t cond;
	const DemoOptions *opt;
	int			index;
	char		sid[UUID_LEN];
	bool		stop;
	bool		lost;			/* heartbeat() said false: the session is dead */
} Heartbeat;

static const char *progname = "demo";

/* ---------------------------------------------------------------------------
 * Small helpers
 * ---------------------------------------------------------------------------
 */

static void
die(const char *fmt,...)
{
	va_list		ap;

	fprintf(stderr, "%s: ", progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

/* Seconds on a clock that never jumps; for pacing and display only. */
static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void
sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static int
parse_int(const char *arg, char opt, int min, int max)
{
	char	   *end;
	long		v;

	errno = 0;
	v = strtol(arg, &end, 10);
	if (errno != 0 || *end != '\0' || end == arg || v < min || v > max)
		die("-%c must be an integer from %d to %d", opt, min, max);
	return (int) v;
}

/*
 * Connect with the user's conninfo (or the PG* environment).  The
 * application_name makes the demo's connections easy to spot in
 * pg_stat_activity.
 */
static PGconn *
demo_connect(const DemoOptions *opt, const char *appname)
{
	const char *keywords[] = {"dbname", "fallback_application_name", NULL};
	const char *values[] = {opt->conninfo, appname, NULL};
	PGconn	   *conn = PQconnectdbParams(keywords, values, 1);

	if (PQstatus(conn) != CONNECTION_OK)
		die("could not connect: %s", PQerrorMessage(conn));
	return conn;
}

/*
 * Run one statement with text parameters, returning the result whatever its
 * status; the caller checks it.  Parameters always travel separately from
 * the SQL text, so no value can change a statement.
 */
static PGresult *
exec_params(PGconn *conn, const char *sql, int nparams,
			const char *const *params)
{
	return PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
}

/* Run a statement that must succeed with status expect; die otherwise. */
static PGresult *
run(PGconn *conn, ExecStatusType expect, const char *sql, int nparams,
	const char *const *params)
{
	PGresult   *res = exec_params(conn, sql, nparams, params);

	if (PQresultStatus(res) != expect)
		die("%sstatement: %s", PQresultErrorMessage(res), sql);
	return res;
}

/* Run a statement that returns no rows and must succeed. */
static void
run_command(PGconn *conn, const char *sql, int nparams,
			const char *const *params)
{
	PQclear(run(conn, PGRES_COMMAND_OK, sql, nparams, params));
}

/* The SQLSTATE of a failed result, or "" */
static const char *
sqlstate(const PGresult *res)
{
	const char *s = PQresultErrorField(res, PG_DIAG_SQLSTATE);

	return s ? s : "";
}

/*
 * Transient failures the worker retries: a deadlock or serialization
 * failure rolls back only the transaction, and running it again is safe.
 */
static bool
is_retryable(const PGresult *res)
{
	return strcmp(sqlstate(res), "40P01") == 0 ||
		strcmp(sqlstate(res), "40001") == 0;
}

/*
 * distlock refuses a session that has expired (55000) or has been reaped
 * (42704): the worker must stop using it and open a new one.
 */
static bool
is_session_gone(const PGresult *res)
{
	return strcmp(sqlstate(res), "55000") == 0 ||
		strcmp(sqlstate(res), "42704") == 0;
}

/* ---------------------------------------------------------------------------
 * Worker
 * ---------------------------------------------------------------------------
 */

/*
 * Note something unusual in distlock_demo.demo_events, where the parent
 * picks it up for display.  Workers write no terminal output of their own,
 * so that the parent's redrawn status lines stay intact.
 */
static void
worker_event(PGconn *conn, int index, const char *fmt,...)
{
	char		msg[256];
	char		idx[16];
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(idx, sizeof(idx), "%d", index);
	run_command(conn,
				"INSERT INTO distlock_demo.demo_events (worker, message)"
				" VALUES ($1, $2)",
				2, (const char *[]) {idx, msg});
}

/* Open a session that says, in its info, which run and worker it serves. */
static void
worker_open_session(PGconn *conn, const DemoOptions *opt, int index,
					const char *owner, char *sid)
{
	char		ttl[32];
	char		idx[16];
	PGresult   *res;

	snprintf(ttl, sizeof(ttl), "%d seconds", opt->session_ttl);
	snprintf(idx, sizeof(idx), "%d", index);
	res = run(conn, PGRES_TUPLES_OK,
			  "SELECT distlock.session_open($1::interval, $2,"
			  " jsonb_build_object('run', $3::text, 'worker', $4::int))",
			  4, (const char *[]) {ttl, owner, opt->queue, idx});
	snprintf(sid, UUID_LEN, "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
}

/*
 * The heartbeat thread: heartbeat() every third of the session ttl on a
 * connection of its own, so a worker busy in a long job or waiting on a row
 * lock still keeps its session.  When heartbeat() says false the session is
 * dead for good; the thread flags it and waits for the worker to open a new
 * one.
 */
static void *
heartbeat_main(void *arg)
{
	Heartbeat  *hb = arg;
	PGconn	   *conn = demo_connect(hb->opt, "distlock-demo heartbeat");
	long		interval_ms = hb->opt->session_ttl * 1000L / 3;

	pthread_mutex_lock(&hb->mutex);
	while (!hb->stop)
	{
		struct timespec deadline;
		char		sid[UUID_LEN];
		PGresult   *res;
		bool		alive;

		clock_gettime(CLOCK_REALTIME, &deadline);
		deadline.tv_sec += interval_ms / 1000;
		deadline.tv_nsec += (interval_ms % 1000) * 1000000L;
		if (deadline.tv_nsec >= 1000000000L)
		{
			deadline.tv_sec++;
			deadline.tv_nsec -= 1000000000L;
		}
		while (!hb->stop &&
			   pthread_cond_timedwait(&hb->cond, &hb->mutex, &deadline) != ETIMEDOUT)
			;
		if (hb->stop)
			break;
		if (hb->lost)
			continue;

		/* Don't hold the mutex across a round trip to the server. */
		memcpy(sid, hb->sid, UUID_LEN);
		pthread_mutex_unlock(&hb->mutex);
		res = run(conn, PGRES_TUPLES_OK, "SELECT distlock.heartbeat($1)",
				  1, (const char *[]) {sid});
		alive = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
		PQclear(res);
		pthread_mutex_lock(&hb->mutex);

		/* The worker may have replaced the session meanwhile. */
		if (!alive && strcmp(sid, hb->sid) == 0)
			hb->lost = true;
	}
	pthread_mutex_unlock(&hb->mutex);
	PQfinish(conn);
	return NULL;
}

/* Has the session died under us? */
static bool
heartbeat_is_lost(Heartbeat *hb)
{
	bool		lost;

	pthread_mutex_lock(&hb->mutex);
	lost = hb->lost;
	pthread_mutex_unlock(&hb->mutex);
	return lost;
}

/* Mark the session dead, as the heartbeat thread would. */
static void
heartbeat_set_lost(Heartbeat *hb)
{
	pthread_mutex_lock(&hb->mutex);
	hb->lost = true;
	pthread_mutex_unlock(&hb->mutex);
}

/*
 * If the session died under us (a pause longer than its ttl, say), open a
 * new one.  Work claimed under the old session is no longer ours: its
 * complete() calls return false and their effects roll back.
 */
static void
worker_check_session(PGconn *conn, Heartbeat *hb, const char *owner)
{
	char		sid[UUID_LEN];

	if (!heartbeat_is_lost(hb))
		return;

	worker_open_session(conn, hb->opt, hb->index, owner, sid);
	pthread_mutex_lock(&hb->mutex);
	memcpy(hb->sid, sid, UUID_LEN);
	hb->lost = false;
	pthread_mutex_unlock(&hb->mutex);
	worker_event(conn, hb->index, "w%d lost its session and opened a new one",
				 hb->index);
}

/*
 * Compete for the report lease once.  A winner writes the report under
 * fence() in one transaction: fence() raises unless the token is still the
 * live lease's, and keeps any other owner's try_acquire() waiting until we
 * commit, so the row commits only while the lease is ours.  Returns how many
 * seconds the lease has left (the winner sits out until then), or 0.
 */
static double
worker_lease(PGconn *conn, const DemoOptions *opt, int index,
			 const char *owner, Heartbeat *hb, const char *sid)
{
	char		ttl[32];
	char		idx[16];
	char		token[32];
	PGresult   *res;
	double		left = 0;

	snprintf(ttl, sizeof(ttl), "%d seconds", opt->lease_ttl);
	snprintf(idx, sizeof(idx), "%d", index);

	/* Bound to our session: if we die, the lease ends with the session. */
	res = exec_params(conn,
					  "SELECT distlock.try_acquire($1, $2, $3::interval, $4::uuid)",
					  4, (const char *[]) {LEASE_NAME, owner, ttl, sid});
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
	{
		if (!is_session_gone(res) && !is_retryable(res))
			die("%s", PQresultErrorMessage(res));
		if (is_session_gone(res))
			heartbeat_set_lost(hb);
		PQclear(res);
		return 0;
	}
	if (PQgetisnull(res, 0, 0))
	{
		PQclear(res);			/* someone else leads this period */
		return 0;
	}
	snprintf(token, sizeof(token), "%s", PQgetvalue(res, 0, 0));
	PQclear(res);

	for (int attempt = 0; attempt < 5; attempt++)
	{
		run_command(conn, "BEGIN", 0, NULL);
		res = exec_params(conn, "SELECT distlock.fence($1, $2::bigint)",
						  2, (const char *[]) {LEASE_NAME, token});
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			bool		retry = is_retryable(res);

			if (!retry && strcmp(sqlstate(res), "55000") != 0)
				die("%s", PQresultErrorMessage(res));
			PQclear(res);
			run_command(conn, "ROLLBACK", 0, NULL);
			if (retry)
				continue;
			worker_event(conn, index,
						 "w%d: fence refused stale token %s; no report written",
						 index, token);
			return 0;
		}
		PQclear(res);

		/*
		 * Record the lease as it stands now, for the summary's overlap check;
		 * reading distlock.locks needs the privileges the demo's superuser
		 * has.
		 */
		res = run(conn, PGRES_TUPLES_OK,
				  "INSERT INTO distlock_demo.demo_reports"
				  " (token, writer, written_at, lease_acquired, lease_expires)"
				  " SELECT $2::bigint, $3::int, clock_timestamp(),"
				  "  l.acquired_at, l.expires_at"
				  " FROM distlock.locks l WHERE l.name = $1"
				  " RETURNING extract(epoch FROM lease_expires - written_at)",
				  3, (const char *[]) {LEASE_NAME, token, idx});
		if (PQntuples(res) == 1)
			left = atof(PQgetvalue(res, 0, 0));
		PQclear(res);
		res = exec_params(conn, "COMMIT", 0, NULL);
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
			die("%s", PQresultErrorMessage(res));
		PQclear(res);
		return left;
	}
	die("gave up writing the report after repeated deadlocks");
	return 0;					/* keep the compiler quiet */
}

/* The "work" of a job: Collatz steps of its n, plus a simulated wait. */
static long
do_work(long n, int work_ms)
{
	long		steps = 0;

	while (n > 1)
	{
		n = (n % 2 == 0) ? n / 2 : 3 * n + 1;
		steps++;
	}
	if (work_ms > 0)
		sleep_ms(work_ms);
	return steps;
}

/*
 * Acknowledge one job and record its effect in the same transaction.  The
 * effect is inserted only when complete() returned true; when it returned
 * false (our session died and the job went to someone else) the transaction
 * rolls back, so no effect of ours can outlive a refused acknowledgement.
 */
static void
worker_ack(PGconn *conn, int index, const char *job, const char *sid,
		   long steps, Heartbeat *hb)
{
	char		result[64];
	char		idx[16];
	PGresult   *res;

	snprintf(result, sizeof(result), "{\"collatz_steps\": %ld}", steps);
	snprintf(idx, sizeof(idx), "%d", index);

	for (int attempt = 0; attempt < 5; attempt++)
	{
		bool		acked;

		run_command(conn, "BEGIN", 0, NULL);
		res = exec_params(conn,
						  "SELECT distlock.complete($1::bigint, $2::uuid, $3::jsonb)",
						  3, (const char *[]) {job, sid, result});
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			if (!is_retryable(res))
				die("%s", PQresultErrorMessage(res));
			PQclear(res);
			run_command(conn, "ROLLBACK", 0, NULL);
			continue;
		}
		acked = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
		PQclear(res);

		if (!acked)
		{
			run_command(conn, "ROLLBACK", 0, NULL);
			heartbeat_set_lost(hb);
			worker_event(conn, index,
						 "w%d: complete(%s) refused, effect rolled back",
						 index, job);
			return;
		}

		run_command(conn,
					"INSERT INTO distlock_demo.demo_effects"
					" (job_id, worker, session_id, result, done_at)"
					" VALUES ($1::bigint, $2::int, $3::uuid, $4::jsonb,"
					"  clock_timestamp())",
					4, (const char *[]) {job, idx, sid, result});
		res = exec_params(conn, "COMMIT", 0, NULL);
		if (PQresultStatus(res) == PGRES_COMMAND_OK)
		{
			PQclear(res);
			return;
		}
		if (!is_retryable(res))
			die("%s", PQresultErrorMessage(res));
		PQclear(res);
	}
	die("gave up acknowledging job %s after repeated deadlocks", job);
}

/* Are there jobs left that someone (perhaps a dead session) still holds? */
static bool
worker_queue_drained(PGconn *conn, const DemoOptions *opt)
{
	PGresult   *res;
	bool		drained;

	res = run(conn, PGRES_TUPLES_OK,
			  "SELECT coalesce(sum(pending + running), 0) = 0"
			  " FROM distlock.queue_stats WHERE queue = $1",
			  1, (const char *[]) {opt->queue});
	drained = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	return drained;
}

/*
 * What records the claimed jobs of CTE c for the worker of parameter
 * worker and returns their ids and n.
 */
#define CLAIM_RECORD(worker) \
	" INSERT INTO distlock_demo.demo_claims AS dc" \
	" (job_id, worker, session_id, attempt, claimed_at)" \
	" SELECT id, " worker "::int, session_id, attempts, claimed_at" \
	"  FROM c" \
	" RETURNING dc.job_id," \
	"  (SELECT (c.payload->>'n')::bigint FROM c WHERE c.id = dc.job_id)"

/*
 * Wait in the server, until the next turn at the lease at the latest, for
 * jobs to claim; record those claimed as the claim statement does, and
 * return the same result (or the error).
 */
static PGresult *
worker_claim_wait(PGconn *conn, const DemoOptions *opt, const char *sid,
				  const char *batch, const char *idx, double until)
{
	char		wait[32];
	char	   *jobs;
	PGresult   *res;
	int			ms = (int) ((until - now_s()) * 1000);

	snprintf(wait, sizeof(wait), "%d ms", ms > IDLE_WAIT_MS ? ms : IDLE_WAIT_MS);
	res = exec_params(conn,
					  "CALL distlock.claim_wait($1, $2::uuid, $3::int, $4::interval)",
					  4, (const char *[]) {opt->queue, sid, batch, wait});
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		return res;
	jobs = strdup(PQgetvalue(res, 0, 0));
	if (jobs == NULL)
		die("out of memory");
	PQclear(res);
	res = exec_params(conn,
					  "WITH c AS (SELECT * FROM"
					  " jsonb_populate_recordset(NULL::distlock.jobs, $1::jsonb))"
					  CLAIM_RECORD("$2"),
					  2, (const char *[]) {jobs, idx});
	free(jobs);
	return res;
}

static int
worker_main(const DemoOptions *opt, int index)
{
	PGconn	   *conn;
	Heartbeat	hb;
	pthread_t	thread;
	char		owner[64];
	char		appname[64];
	char		idx[16];
	char		batch[16];
	double		next_lease_try;
	double		lease_until = 0;
	bool		idle = false;
	PGresult   *res;

	snprintf(owner, sizeof(owner), "w%d:%d", index, (int) getpid());
	snprintf(appname, sizeof(appname), "distlock-demo w%d", index);
	snprintf(idx, sizeof(idx), "%d", index);
	snprintf(batch, sizeof(batch), "%d", opt->batch);

	conn = demo_connect(opt, appname);
	memset(&hb, 0, sizeof(hb));
	pthread_mutex_init(&hb.mutex, NULL);
	pthread_cond_init(&hb.cond, NULL);
	hb.opt = opt;
	hb.index = index;
	worker_open_session(conn, opt, index, owner, hb.sid);
	if (pthread_create(&thread, NULL, heartbeat_main, &hb) != 0)
		die("could not start heartbeat thread");

	/* Spread the workers' lease ticks over the second. */
	next_lease_try = now_s() + (double) (index - 1) / opt->workers;

	for (;;)
	{
		char		sid[UUID_LEN];
		int			njobs;
		char	  **jobs;
		long	   *ns;

		worker_check_session(conn, &hb, owner);
		pthread_mutex_lock(&hb.mutex);
		memcpy(sid, hb.sid, UUID_LEN);
		pthread_mutex_unlock(&hb.mutex);

		/*
		 * Claim a batch and record the claim in the same statement, so that
		 * the summary can tell who held each job and on which attempt.
		 * claim() also reaps expired sessions it meets, which is how a dead
		 * worker's jobs come back.  After a claim that found nothing, wait
		 * in the server for jobs, until the next turn at the lease; the
		 * jobs the wait claimed are recorded just after.
		 */
		if (idle)
			res = worker_claim_wait(conn, opt, sid, batch, idx,
									next_lease_try);
		else
			res = exec_params(conn,
							  "WITH c AS (SELECT * FROM distlock.claim($1, $2::uuid, $3::int))"
							  CLAIM_RECORD("$4"),
							  4, (const char *[]) {opt->queue, sid, batch, idx});
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			if (is_session_gone(res))
				heartbeat_set_lost(&hb);
			else if (!is_retryable(res))
				die("%s", PQresultErrorMessage(res));
			PQclear(res);
			continue;
		}

		/* Copy the batch out, so the result can be freed before the work. */
		njobs = PQntuples(res);
		jobs = malloc(sizeof(char *) * (njobs + 1));
		ns = malloc(sizeof(long) * (njobs + 1));
		if (jobs == NULL || ns == NULL)
			die("out of memory");
		for (int i = 0; i < njobs; i++)
		{
			jobs[i] = strdup(PQgetvalue(res, i, 0));
			ns[i] = atol(PQgetvalue(res, i, 1));
		}
		PQclear(res);

		/*
		 * One pass more than there are jobs, so that a worker with nothing
		 * to do still competes for the lease.
		 */
		for (int i = 0; i <= njobs; i++)
		{
			/* Between jobs, take our turn at the lease. */
			if (now_s() >= next_lease_try && now_s() >= lease_until)
			{
				double		left = worker_lease(conn, opt, index, owner,
												&hb, sid);

				/*
				 * A winner sits out its lease and one more tick, so the
				 * others, who try every tick, get the next period first.
				 */
				next_lease_try = now_s() + LEASE_TRY_MS / 1000.0;
				lease_until = left > 0 ? next_lease_try + left : 0;
			}
			if (i < njobs)
			{
				/*
				 * Once the session is dead its jobs are someone else's: skip
				 * the rest of the batch rather than do work that cannot be
				 * acknowledged.
				 */
				if (!heartbeat_is_lost(&hb))
					worker_ack(conn, index, jobs[i], sid,
							   do_work(ns[i], opt->work_ms), &hb);
				free(jobs[i]);
			}
		}
		free(jobs);
		free(ns);

		idle = njobs == 0;
		if (idle && worker_queue_drained(conn, opt))
			break;
	}

	pthread_mutex_lock(&hb.mutex);
	hb.stop = true;
	pthread_cond_signal(&hb.cond);
	pthread_mutex_unlock(&hb.mutex);
	pthread_join(thread, NULL);

	/* Hand back anything still ours and free the lease at once. */
	res = run(conn, PGRES_TUPLES_OK, "SELECT distlock.session_close($1)",
			  1, (const char *[]) {hb.sid});
	PQclear(res);
	PQfinish(conn);
	return 0;
}

/* ---------------------------------------------------------------------------
 * Parent: setup, display, the kill, the summary
 * ---------------------------------------------------------------------------
 */

static bool on_tty;
static int	drawn_lines;		/* status lines to overwrite on a terminal */

/*
 * The demo's tables.  demo_effects has no unique key on purpose: a second
 * effect for a job must be counted by the summary, not prevented by us.
 */
static const char *const setup_sql[] = {
	"DROP SCHEMA IF EXISTS distlock_demo CASCADE",
	"CREATE SCHEMA distlock_demo",
	"CREATE TABLE distlock_demo.demo_run"
	" (queue text NOT NULL, workers int NOT NULL, jobs int NOT NULL,"
	"  started_at timestamptz NOT NULL)",
	"CREATE TABLE distlock_demo.demo_claims"
	" (job_id bigint NOT NULL, worker int NOT NULL, session_id uuid NOT NULL,"
	"  attempt int NOT NULL, claimed_at timestamptz NOT NULL)",
	"CREATE TABLE distlock_demo.demo_effects"
	" (job_id bigint NOT NULL, worker int NOT NULL, session_id uuid NOT NULL,"
	"  result jsonb NOT NULL, done_at timestamptz NOT NULL)",
	"CREATE INDEX ON distlock_demo.demo_effects (worker)",
	"CREATE TABLE distlock_demo.demo_reports"
	" (id bigserial PRIMARY KEY, token bigint NOT NULL, writer int NOT NULL,"
	"  written_at timestamptz NOT NULL, lease_acquired timestamptz NOT NULL,"
	"  lease_expires timestamptz)",
	"CREATE TABLE distlock_demo.demo_kills"
	" (worker int NOT NULL, pid int NOT NULL, session_id uuid NOT NULL,"
	"  killed_at timestamptz NOT NULL, session_expires timestamptz NOT NULL)",
	"CREATE TABLE distlock_demo.demo_held (job_id bigint NOT NULL)",
	"CREATE TABLE distlock_demo.demo_events"
	" (id bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp(),"
	"  worker int, message text NOT NULL)",
	NULL
};

/* Create the tables, pick the queue name, and enqueue the jobs. */
static void
parent_setup(DemoOptions *opt)
{
	PGconn	   *conn = demo_connect(opt, "distlock-demo setup");
	char		jobs[16];
	char		workers[16];
	PGresult   *res;

	res = run(conn, PGRES_TUPLES_OK,
			  "SELECT count(*) FROM pg_extension WHERE extname = $1",
			  1, (const char *[]) {"distlock"});
	if (strcmp(PQgetvalue(res, 0, 0), "1") != 0)
		die("extension distlock is not installed in this database;"
			" run CREATE EXTENSION distlock");
	PQclear(res);

	/* Quiet the NOTICEs of DROP ... IF EXISTS. */
	run_command(conn, "SET client_min_messages = warning", 0, NULL);
	for (int i = 0; setup_sql[i] != NULL; i++)
		run_command(conn, setup_sql[i], 0, NULL);

	/* A fresh queue per run, so an existing server's old jobs don't count. */
	res = run(conn, PGRES_TUPLES_OK,
			  "SELECT 'demo-' || to_char(clock_timestamp(), 'YYYYMMDD-HH24MISS-US')",
			  0, NULL);
	snprintf(opt->queue, sizeof(opt->queue), "%s", PQgetvalue(res, 0, 0));
	PQclear(res);

	snprintf(jobs, sizeof(jobs), "%d", opt->jobs);
	snprintf(workers, sizeof(workers), "%d", opt->workers);
	res = run(conn, PGRES_TUPLES_OK,
			  "SELECT count(distlock.enqueue($1, jsonb_build_object('n', g)))"
			  " FROM generate_series(1, $2::int) AS g",
			  2, (const char *[]) {opt->queue, jobs});
	PQclear(res);
	run_command(conn,
				"INSERT INTO distlock_demo.demo_run (queue, workers, jobs, started_at)"
				" VALUES ($1, $2::int, $3::int, clock_timestamp())",
				3, (const char *[]) {opt->queue, workers, jobs});
	PQfinish(conn);
}

/* Print a line of narrative, above the status block on a terminal. */
static void
say(double t0, const char *fmt,...)
{
	va_list		ap;

	if (on_tty && drawn_lines > 0)
	{
		/* Move up over the status block and clear it; it is redrawn later. */
		printf("\033[%dA\033[J", drawn_lines);
		drawn_lines = 0;
	}
	printf("[%5.1f s] ", now_s() - t0);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	if (!on_tty)
		fflush(stdout);
}

/* Refresh each worker's done/live/holding counts from the database. */
static void
parent_poll_workers(PGconn *conn, const DemoOptions *opt, WorkerProc *w)
{
	char		workers[16];
	PGresult   *res;

	snprintf(workers, sizeof(workers), "%d", opt->workers);
	res = run(conn, PGRES_TUPLES_OK,
			  "SELECT w.i,"
			  " (SELECT count(*) FROM distlock_demo.demo_effects e"
			  "   WHERE e.worker = w.i),"
			  " EXISTS (SELECT 1 FROM distlock.live_sessions s"
			  "   WHERE s.info->>'run' = $1 AND s.info->>'worker' = w.i::text),"
			  " (SELECT count(*) FROM distlock.jobs j"
			  "   JOIN distlock.sessions s ON s.id = j.session_id"
			  "   WHERE j.queue = $1 AND j.status = 'running'"
			  "   AND s.info->>'worker' = w.i::text)"
			  " FROM generate_series(1, $2::int) AS w(i) ORDER BY w.i",
			  2, (const char *[]) {opt->queue, workers});
	for (int i = 0; i < PQntuples(res) && i < opt->workers; i++)
	{
		w[i].done = atol(PQgetvalue(res, i, 1));
		w[i].live = strcmp(PQgetvalue(res, i, 2), "t") == 0;
		w[i].holding = atol(PQgetvalue(res, i, 3));
	}
	PQclear(res);
}

/*
 * Stop the worker holding the most claimed jobs, check under the stop that
 * it really holds some, and kill it with SIGKILL: no goodbye, no
 * session_close.  Records the kill and the jobs it held, for the summary.
 * Returns the victim's index (1-based), or 0 to try again later.
 */
static int
parent_kill(PGconn *conn, const DemoOptions *opt, WorkerProc *w,
			char *victim_sid, long *held, double t0)
{
	int			v = -1;
	char		idx[16];
	char		pid[16];
	PGresult   *res;
	int			status;

	for (int i = 0; i < opt->workers; i++)
		if (!w[i].exited && w[i].live && w[i].holding > 0 &&
			(v < 0 || w[i].holding > w[v].holding))
			v = i;
	if (v < 0)
		return 0;

	/*
	 * Freeze it first, and let any statement it already sent finish, so the
	 * jobs we see it holding are the jobs it dies holding.
	 */
	kill(w[v].pid, SIGSTOP);
	sleep_ms(100);
	snprintf(idx, sizeof(idx), "%d", v + 1);
	res = run(conn, PGRES_TUPLES_OK,
			  "SELECT s.id, (SELECT count(*) FROM distlock.jobs j"
			  "   WHERE j.session_id = s.id AND j.status = 'running')"
			  " FROM distlock.live_sessions s"
			  " WHERE s.info->>'run' = $1 AND s.info->>'worker' = $2"
			  " ORDER BY s.created_at DESC LIMIT 1",
			  2, (const char *[]) {opt->queue, idx});
	if (PQntuples(res) == 0 || strcmp(PQgetvalue(res, 0, 1), "0") == 0)
	{
		PQclear(res);
		kill(w[v].pid, SIGCONT);
		return 0;
	}
	snprintf(victim_sid, UUID_LEN, "%s", PQgetvalue(res, 0, 0));
	PQclear(res);

	kill(w[v].pid, SIGKILL);
	if (waitpid(w[v].pid, &status, 0) == w[v].pid)
	{
		w[v].exited = true;
		w[v].status = status;
	}
	w[v].killed = true;

	/*
	 * Its backend sees the connection drop and rolls back whatever the
	 * worker had open.  The jobs it had claimed stay running, under a
	 * session nobody heartbeats any more.
	 */
	snprintf(pid, sizeof(pid), "%d", (int) w[v].pid);
	run_command(conn, "BEGIN", 0, NULL);
	/*
	 * The expiry its heartbeats promised, as live_sessions shows it: with
	 * the heartbeats in shared memory the row's expires_at is only a bound,
	 * written ahead, and the session may expire before it.
	 */
	run_command(conn,
				"INSERT INTO distlock_demo.demo_kills"
				" (worker, pid, session_id, killed_at, session_expires)"
				" SELECT $1::int, $2::int, s.id, clock_timestamp(), s.expires_at"
				" FROM distlock.live_sessions s WHERE s.id = $3::uuid",
				3, (const char *[]) {idx, pid, victim_sid});
	run_command(conn,
				"INSERT INTO distlock_demo.demo_held (job_id)"
				" SELECT j.id FROM distlock.jobs j"
				" WHERE j.session_id = $1::uuid AND j.status = 'running'",
				1, (const char *[]) {victim_sid});
	run_command(conn, "COMMIT", 0, NULL);

	res = run(conn, PGRES_TUPLES_OK,
			  "SELECT (SELECT count(*) FROM distlock_demo.demo_held),"
			  " extract(epoch FROM k.session_expires - k.killed_at)"
			  " FROM distlock_demo.demo_kills k",
			  0, NULL);
	*held = atol(PQgetvalue(res, 0, 0));
	say(t0, "SIGKILL w%d (pid %d) while it holds %ld claimed jobs;"
		" its session expires in %.1f s", v + 1, (int) w[v].pid, *held,
		atof(PQgetvalue(res, 0, 1)));
	PQclear(res);
	return v + 1;
}

/* Redraw the status block: a line per worker and a progress bar. */
static void
parent_draw(const DemoOptions *opt, const WorkerProc *w, long done,
			int alive, const char *leader, double t0, bool victim_expired, long reclaimed, long held)
{
	int			width = 30;
	int			filled = opt->jobs > 0 ? (int) (done * width / opt->jobs) : width;

	if (drawn_lines > 0)
		printf("\033[%dA\033[J", drawn_lines);
	drawn_lines = 0;
	for (int i = 0; i < opt->workers; i++)
	{
		char		state[64];

		if (w[i].killed)
			snprintf(state, sizeof(state), "KILLED, session %s, re-claimed %ld/%ld",
					 victim_expired ? "expired" : "expiring", reclaimed, held);
		else if (w[i].exited)
			snprintf(state, sizeof(state), "finished, session closed");
		else
			snprintf(state, sizeof(state), "session %s, holding %ld",
					 w[i].live ? "live" : "dead", w[i].holding);
		printf("  w%-2d pid %-7d done %5ld  %s\n", i + 1, (int) w[i].pid,
			   w[i].done, state);
		drawn_lines++;
	}
	printf("  [");
	for (int i = 0; i < width; i++)
		putchar(i < filled ? '#' : '.');
	printf("] %ld/%d  sessions alive %d  leader %s  %.1f s\n",
		   done, opt->jobs, alive, leader, now_s() - t0);
	drawn_lines++;
	fflush(stdout);
}

/* The closing check: every number comes from one SQL statement. */
static bool
parent_summary(PGconn *conn, const DemoOptions *opt, bool workers_ok)
{
	PGresult   *res;
	int			passed = 0,
				failed = 0;
	bool		killed;
	long		enqueued,
				completed,
				effects,
				dups,
				lost,
				foreign,
				held,
				reclaimed,
				retried,
				reports,
				tokens,
				writers,
				overlaps;

	res = run(conn, PGRES_TUPLES_OK,
			  "WITH run AS (SELECT * FROM distlock_demo.demo_run),"
			  " jobs AS (SELECT j.* FROM distlock.jobs j, run WHERE j.queue = run.queue),"
			  " eff AS (SELECT * FROM distlock_demo.demo_effects),"
			  " kill AS (SELECT * FROM distlock_demo.demo_kills),"
			  /* one row per lease grant: when granted, when last written under */
			  " grant_ AS (SELECT token, min(lease_acquired) AS acquired,"
			  "   max(written_at) AS last_written, count(DISTINCT writer) AS writers"
			  "   FROM distlock_demo.demo_reports GROUP BY token)"
			  " SELECT"
			  " (SELECT count(*) FROM jobs),"
			  " (SELECT count(*) FROM jobs WHERE status = 'completed'),"
			  " (SELECT count(*) FROM eff),"
			  " (SELECT count(*) - count(DISTINCT job_id) FROM eff),"
			  " (SELECT count(*) FROM jobs j"
			  "   WHERE NOT EXISTS (SELECT 1 FROM eff WHERE eff.job_id = j.id)),"
			  /* an effect from a session other than the one whose ack counted */
			  " (SELECT count(*) FROM eff JOIN jobs j ON j.id = eff.job_id"
			  "   WHERE j.status <> 'completed' OR j.session_id <> eff.session_id),"
			  " (SELECT count(*) FROM kill),"
			  " (SELECT count(*) FROM distlock_demo.demo_held),"
			  /* held by the victim, claimed again by another session after it expired */
			  " (SELECT count(*) FROM distlock_demo.demo_held h, kill"
			  "   WHERE EXISTS (SELECT 1 FROM distlock_demo.demo_claims c"
			  "     WHERE c.job_id = h.job_id AND c.session_id <> kill.session_id"
			  "     AND c.claimed_at >= kill.session_expires AND c.attempt > 1)),"
			  " (SELECT count(*) FROM jobs WHERE attempts > 1),"
			  " (SELECT count(*) FROM distlock_demo.demo_reports),"
			  " (SELECT count(*) FROM grant_),"
			  " (SELECT count(DISTINCT writer) FROM distlock_demo.demo_reports),"
			  /*
			   * Two grants overlap if a report was written under the older
			   * token at or after the newer token was granted, or if two
			   * workers wrote under one token.
			   */
			  " (SELECT count(*) FROM grant_ a JOIN grant_ b ON a.token < b.token"
			  "   WHERE a.last_written >= b.acquired)"
			  "  + (SELECT count(*) FROM grant_ WHERE writers > 1),"
			  " (SELECT extract(epoch FROM max(eff.done_at) - run.started_at)"
			  "   FROM eff, run GROUP BY run.started_at)",
			  0, NULL);

	enqueued = atol(PQgetvalue(res, 0, 0));
	completed = atol(PQgetvalue(res, 0, 1));
	effects = atol(PQgetvalue(res, 0, 2));
	dups = atol(PQgetvalue(res, 0, 3));
	lost = atol(PQgetvalue(res, 0, 4));
	foreign = atol(PQgetvalue(res, 0, 5));
	killed = atol(PQgetvalue(res, 0, 6)) > 0;
	held = atol(PQgetvalue(res, 0, 7));
	reclaimed = atol(PQgetvalue(res, 0, 8));
	retried = atol(PQgetvalue(res, 0, 9));
	reports = atol(PQgetvalue(res, 0, 10));
	tokens = atol(PQgetvalue(res, 0, 11));
	writers = atol(PQgetvalue(res, 0, 12));
	overlaps = atol(PQgetvalue(res, 0, 13));

#define CHECK(label, value, cond) \
	do { \
		bool	pass_ = (cond); \
		printf("  %-50s %8ld  %s\n", label, (long) (value), pass_ ? "ok" : "FAILED"); \
		if (pass_) \
			passed++; \
		else \
			failed++; \
	} while (0)

	printf("\nSummary (computed by SQL over distlock.jobs and distlock_demo.*)\n");
	CHECK("jobs enqueued", enqueued, enqueued == opt->jobs);
	CHECK("jobs completed", completed, completed == enqueued);
	CHECK("effect rows", effects, effects == enqueued);
	CHECK("duplicate effects", dups, dups == 0);
	CHECK("lost jobs (no effect)", lost, lost == 0);
	CHECK("effects not matching the accepted ack", foreign, foreign == 0);
	if (opt->workers >= 2)
	{
		CHECK("jobs the killed worker held", held, killed && held > 0);
		CHECK("  re-claimed by others after its session expired",
			  reclaimed, killed && reclaimed == held);
	}
	printf("  %-50s %8ld\n", "jobs claimed more than once", retried);
	CHECK("report writes", reports, reports > 0);
	printf("  %-50s %8ld\n", "  lease grants (fencing tokens)", tokens);
	printf("  %-50s %8ld\n", "  distinct writers", writers);
	CHECK("writers with overlapping leases", overlaps, overlaps == 0);
	CHECK("workers that failed", workers_ok ? 0 : 1, workers_ok);
	if (!PQgetisnull(res, 0, 14))
	{
		double		secs = atof(PQgetvalue(res, 0, 14));

		printf("  %-50s %8.1f s\n", "time taken", secs);
		printf("  %-50s %8.0f jobs/s\n", "throughput",
			   secs > 0 ? completed / secs : 0.0);
	}
	PQclear(res);
	printf("%s\n", failed == 0 ? "all invariants hold" : "INVARIANTS FAILED");
	/* the count .ci/run adds to its sums, as every suite prints one */
	printf("%d passed, %d failed\n", passed, failed);
	return failed == 0;
}

static int
parent_main(DemoOptions *opt)
{
	WorkerProc	w[MAX_WORKERS];
	PGconn	   *conn;
	double		t0;
	double		last_plain = 0;
	long		last_report = 0;
	long		last_event = 0;
	int			victim = 0;
	char		victim_sid[UUID_LEN] = "";
	long		held = 0;
	long		reclaimed = 0;
	bool		victim_expired = false;
	char		last_leader[64] = "";
	bool		workers_ok = true;
	bool		timed_out = false;
	bool		ok;

	on_tty = isatty(STDOUT_FILENO);
	if (on_tty)
		setvbuf(stdout, NULL, _IOFBF, 1 << 16);	/* redraw in one write */

	parent_setup(opt);
	printf("distlock demo: %d workers, %d jobs in queue %s, session ttl %d s,"
		   " lease \"%s\" ttl %d s\n", opt->workers, opt->jobs, opt->queue,
		   opt->session_ttl, LEASE_NAME, opt->lease_ttl);
	fflush(stdout);

	t0 = now_s();
	memset(w, 0, sizeof(w));
	for (int i = 0; i < opt->workers; i++)
	{
		pid_t		pid = fork();

		if (pid < 0)
			die("fork failed: %s", strerror(errno));
		if (pid == 0)
		{
#ifdef __linux__
			/* Don't outlive a parent that was interrupted. */
			prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
			progname = "demo worker";
			exit(worker_main(opt, i + 1));
		}
		w[i].pid = pid;
	}
	say(t0, "forked %d workers", opt->workers);

	conn = demo_connect(opt, "distlock-demo monitor");
	for (;;)
	{
		PGresult   *res;
		long		done;
		int			alive;
		char		leader[64];
		int			running = 0;
		char		after[32];

		/* Reap finished workers. */
		for (int i = 0; i < opt->workers; i++)
		{
			int			status;

			if (!w[i].exited && waitpid(w[i].pid, &status, WNOHANG) == w[i].pid)
			{
				w[i].exited = true;
				w[i].status = status;
				if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
					say(t0, "w%d finished and closed its session", i + 1);
				else
				{
					say(t0, "w%d failed (status %d)", i + 1, status);
					workers_ok = false;
				}
			}
			if (!w[i].exited)
				running++;
		}

		parent_poll_workers(conn, opt, w);
		res = run(conn, PGRES_TUPLES_OK,
				  "SELECT (SELECT count(*) FROM distlock_demo.demo_effects),"
				  " (SELECT count(*) FROM distlock.live_sessions s"
				  "   WHERE s.info->>'run' = $1),"
				  " (SELECT format('w%s (token %s)', s.info->>'worker', l.token)"
				  "   FROM distlock.active_locks l"
				  "   JOIN distlock.sessions s ON s.id = l.session_id"
				  "   WHERE l.name = $2)",
				  2, (const char *[]) {opt->queue, LEASE_NAME});
		done = atol(PQgetvalue(res, 0, 0));
		alive = atoi(PQgetvalue(res, 0, 1));
		snprintf(leader, sizeof(leader), "%s",
				 PQgetisnull(res, 0, 2) ? "none" : PQgetvalue(res, 0, 2));
		PQclear(res);

		/* New reports: each is a lease won and written under fence(). */
		snprintf(after, sizeof(after), "%ld", last_report);
		res = run(conn, PGRES_TUPLES_OK,
				  "SELECT id, writer, token,"
				  " extract(epoch FROM lease_expires - written_at)"
				  " FROM distlock_demo.demo_reports WHERE id > $1::bigint ORDER BY id",
				  1, (const char *[]) {after});
		for (int i = 0; i < PQntuples(res); i++)
		{
			last_report = atol(PQgetvalue(res, i, 0));
			say(t0, "w%s won \"%s\" with token %s, wrote report #%ld under"
				" fence (lease %.1f s left)", PQgetvalue(res, i, 1), LEASE_NAME,
				PQgetvalue(res, i, 2), last_report, atof(PQgetvalue(res, i, 3)));
		}
		PQclear(res);

		/* Anything unusual the workers noted. */
		snprintf(after, sizeof(after), "%ld", last_event);
		res = run(conn, PGRES_TUPLES_OK,
				  "SELECT id, message FROM distlock_demo.demo_events"
				  " WHERE id > $1::bigint ORDER BY id",
				  1, (const char *[]) {after});
		for (int i = 0; i < PQntuples(res); i++)
		{
			last_event = atol(PQgetvalue(res, i, 0));
			say(t0, "%s", PQgetvalue(res, i, 1));
		}
		PQclear(res);

		if (strcmp(leader, last_leader) != 0 && strcmp(leader, "none") == 0)
			say(t0, "lease \"%s\" is free", LEASE_NAME);
		snprintf(last_leader, sizeof(last_leader), "%s", leader);

		/* Midway, kill a worker that holds claimed jobs. */
		if (victim == 0 && opt->workers >= 2 && done >= opt->jobs / 3)
			victim = parent_kill(conn, opt, w, victim_sid, &held, t0);

		if (victim != 0 && (!victim_expired || reclaimed < held))
		{
			res = run(conn, PGRES_TUPLES_OK,
					  "SELECT NOT EXISTS (SELECT 1 FROM distlock.live_sessions"
					  "   WHERE id = $1::uuid),"
					  " (SELECT count(*) FROM distlock_demo.demo_held h"
					  "   WHERE EXISTS (SELECT 1 FROM distlock_demo.demo_claims c"
					  "     WHERE c.job_id = h.job_id AND c.session_id <> $1::uuid)),"
					  " (SELECT string_agg(DISTINCT 'w' || c.worker, ', ')"
					  "   FROM distlock_demo.demo_held h"
					  "   JOIN distlock_demo.demo_claims c ON c.job_id = h.job_id"
					  "   WHERE c.session_id <> $1::uuid)",
					  1, (const char *[]) {victim_sid});
			if (!victim_expired && strcmp(PQgetvalue(res, 0, 0), "t") == 0)
			{
				victim_expired = true;
				say(t0, "w%d's session has expired: its %ld jobs are claimable again",
					victim, held);
			}
			if (atol(PQgetvalue(res, 0, 1)) != reclaimed)
			{
				reclaimed = atol(PQgetvalue(res, 0, 1));
				if (reclaimed == held)
					say(t0, "all %ld jobs w%d held were re-claimed by %s",
						held, victim, PQgetvalue(res, 0, 2));
			}
			PQclear(res);
		}

		if (on_tty)
			parent_draw(opt, w, done, alive, leader, t0, victim_expired,
						reclaimed, held);
		else if (now_s() - last_plain >= 2.0)
		{
			say(t0, "%ld/%d jobs done, %d sessions alive, leader %s",
				done, opt->jobs, alive, leader);
			last_plain = now_s();
		}

		if (running == 0)
			break;
		if (now_s() - t0 > opt->timeout)
		{
			say(t0, "timed out after %d s; stopping the workers", opt->timeout);
			for (int i = 0; i < opt->workers; i++)
				if (!w[i].exited)
				{
					kill(w[i].pid, SIGKILL);
					waitpid(w[i].pid, &w[i].status, 0);
					w[i].exited = true;
				}
			timed_out = true;
			break;
		}
		sleep_ms(on_tty ? 200 : 250);
	}

	if (on_tty)
	{
		drawn_lines = 0;		/* keep the final status block on screen */
		fflush(stdout);
		setvbuf(stdout, NULL, _IOLBF, 0);
	}
	ok = parent_summary(conn, opt, workers_ok && !timed_out);
	fflush(stdout);
	PQfinish(conn);
	return ok ? 0 : 1;
}

static void
usage(void)
{
	printf("Usage: demo [-d conninfo] [-w workers] [-n jobs] [-b batch]"
		   " [-m work_ms]\n"
		   "            [-s session_ttl_s] [-l lease_ttl_s] [-T timeout_s]\n"
		   "Without -d, connects with the PG* environment variables (or DSN).\n");
}

int
main(int argc, char **argv)
{
	DemoOptions opt = {
		.conninfo = NULL,
		.workers = 4,
		.jobs = 2000,
		.batch = 5,
		.work_ms = 20,
		.session_ttl = 2,
		.lease_ttl = 3,
		.timeout = 120,
	};
	int			c;

	if (getenv("DSN") != NULL && getenv("DSN")[0] != '\0')
		opt.conninfo = getenv("DSN");
	while ((c = getopt(argc, argv, "d:w:n:b:m:s:l:T:h")) != -1)
	{
		switch (c)
		{
			case 'd':
				opt.conninfo = optarg;
				break;
			case 'w':
				opt.workers = parse_int(optarg, 'w', 1, MAX_WORKERS);
				break;
			case 'n':
				opt.jobs = parse_int(optarg, 'n', 1, 1000000);
				break;
			case 'b':
				opt.batch = parse_int(optarg, 'b', 1, 1000);
				break;
			case 'm':
				opt.work_ms = parse_int(optarg, 'm', 0, 10000);
				break;
			case 's':
				opt.session_ttl = parse_int(optarg, 's', 1, 3600);
				break;
			case 'l':
				opt.lease_ttl = parse_int(optarg, 'l', 1, 3600);
				break;
			case 'T':
				opt.timeout = parse_int(optarg, 'T', 1, 86400);
				break;
			case 'h':
				usage();
				return 0;
			default:
				usage();
				return 2;
		}
	}
	if (optind < argc)
	{
		usage();
		return 2;
	}
	return parent_main(&opt);
}
