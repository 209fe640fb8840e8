-- Plain heartbeat: update this worker's row.
\if :have_sid = 0
SELECT bench_sid(:client_id) AS sid, 1 AS have_sid \gset
\endif
UPDATE worker_sessions SET heartbeated_at = now() WHERE id = :sid;
