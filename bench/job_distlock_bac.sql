-- distlock batch loop in one call and one transaction per batch:
-- complete_batch_and_claim() acknowledges the batch in hand and claims the
-- next.  A client's first cycle has no batch in hand and only claims.
\if :have_sid = 0
SELECT bench_sid(:client_id) AS sid, 1 AS have_sid \gset
SELECT array_agg(id) AS ids, json_agg(payload) AS payloads
  FROM distlock.claim('bench', :sid, :batch) \gset
\else
SELECT array_agg(id) AS ids, json_agg(payload) AS payloads
  FROM distlock.complete_batch_and_claim(:ids::bigint[], :sid) \gset
\endif
