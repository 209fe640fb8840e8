-- distlock job cycle in one call and one transaction per job:
-- complete_and_claim() acknowledges the job in hand and claims the next.
-- A client's first cycle has no job in hand and only claims.
\if :have_sid = 0
SELECT bench_sid(:client_id) AS sid, 1 AS have_sid \gset
SELECT id AS jid, payload FROM distlock.claim('bench', :sid) \gset
\else
SELECT id AS jid, payload FROM distlock.complete_and_claim(:jid, :sid) \gset
\endif
