-- A job's whole life, for bench/wake.py's retention row: enqueue one job,
-- claim one (not necessarily the same: the clients share the queue), and
-- complete it; three transactions.  Finished jobs pile up in distlock.jobs
-- until distlock.job_retention has them pruned.
\if :have_sid = 0
SELECT bench_sid(:client_id) AS sid, 1 AS have_sid \gset
\endif
SELECT distlock.enqueue('retention', '{"to": "user@example.com"}');
SELECT id AS jid FROM distlock.claim('retention', :sid) \gset
SELECT distlock.complete(:jid, :sid);
