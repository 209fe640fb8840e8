-- A job's whole life, for bench/wake.py's retention row: enqueue one job,
-- claim one (not necessarily the same: the clients share the queue), and
-- complete it; three transactions.  Finished jobs pile up in distlock.jobs
-- until distlock.job_retention has them pruned.
\if :have_sid = 0
SELECT bench_sid(:client_id) AS sid, 1 AS have_sid \gset
\endif
SELECT distlock.enqueue('retention', '{"to": "user@example.com"}');
-- a claim can find no job it may take (another client's claim holds the
-- only one its snapshot sees); the job is taken by a later claim
SELECT coalesce((SELECT id FROM distlock.claim('retention', :sid)), 0) AS jid \gset
\if :jid > 0
SELECT distlock.complete(:jid, :sid);
\endif
