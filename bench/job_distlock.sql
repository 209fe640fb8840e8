-- distlock job cycle: claim :batch jobs, then acknowledge them (one
-- complete(), or one complete_batch() for the batch).  Two transactions per
-- cycle, as a worker that acknowledges in the transaction of its effects
-- would run them.
\if :have_sid = 0
SELECT bench_sid(:client_id) AS sid, 1 AS have_sid \gset
\endif
\if :batch = 1
SELECT id AS jid, payload FROM distlock.claim('bench', :sid) \gset
SELECT distlock.complete(:jid, :sid);
\else
SELECT array_agg(id) AS ids, json_agg(payload) AS payloads
  FROM distlock.claim('bench', :sid, :batch) \gset
SELECT count(*) FROM distlock.complete_batch(:ids::bigint[], :sid);
\endif
