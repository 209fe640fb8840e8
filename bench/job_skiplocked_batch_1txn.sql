-- Plain SQL in one statement and one transaction per batch: mark the tasks
-- in hand completed and claim the next batch (the SQL counterpart of
-- distlock.complete_batch_and_claim).  A client's first cycle only claims.
\if :jid = 0
WITH c AS (
	UPDATE tasks SET state = 'running', worker = 'client-' || :client_id::text,
		   attempts = attempts + 1
	 WHERE id IN (SELECT id FROM tasks
				   WHERE queue = 'bench' AND state = 'pending' AND run_at <= now()
				   ORDER BY priority DESC, run_at, id LIMIT :batch FOR UPDATE SKIP LOCKED)
	RETURNING id, payload)
SELECT array_agg(id) AS ids, json_agg(payload) AS payloads, 1 AS jid FROM c \gset
\else
WITH done AS (
	UPDATE tasks SET state = 'completed', finished_at = now()
	 WHERE id = ANY(:ids::bigint[]) AND state = 'running'
	   AND worker = 'client-' || :client_id::text),
c AS (
	UPDATE tasks SET state = 'running', worker = 'client-' || :client_id::text,
		   attempts = attempts + 1
	 WHERE id IN (SELECT id FROM tasks
				   WHERE queue = 'bench' AND state = 'pending' AND run_at <= now()
				   ORDER BY priority DESC, run_at, id LIMIT :batch FOR UPDATE SKIP LOCKED)
	RETURNING id, payload)
SELECT array_agg(id) AS ids, json_agg(payload) AS payloads FROM c \gset
\endif
