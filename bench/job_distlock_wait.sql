-- distlock job cycle with the waiting claim: claim_wait() (which, with work
-- in the queue, claims at once and does not wait), then complete().  Two
-- transactions per cycle, as job_distlock.sql.  The claimed job's id is
-- read from the returned jsonb array inside the complete() statement, so
-- the cycle makes as many round trips as claim + complete.
\if :have_sid = 0
SELECT bench_sid(:client_id) AS sid, 1 AS have_sid \gset
\endif
CALL distlock.claim_wait('bench', :sid, 1, '1 second', NULL) \gset
SELECT distlock.complete(((:jobs)::jsonb -> 0 ->> 'id')::bigint, :sid);
