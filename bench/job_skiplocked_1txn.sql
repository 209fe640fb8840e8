-- Plain SQL in one statement and one transaction per job: mark the task in
-- hand completed and claim the next (the SQL counterpart of
-- distlock.complete_and_claim).  A client's first cycle only claims.
\if :jid = 0
UPDATE tasks SET state = 'running', worker = 'client-' || :client_id::text,
	   attempts = attempts + 1
 WHERE id = (SELECT id FROM tasks
			  WHERE queue = 'bench' AND state = 'pending' AND run_at <= now()
			  ORDER BY priority DESC, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id AS jid, payload \gset
\else
WITH done AS (
	UPDATE tasks SET state = 'completed', finished_at = now()
	 WHERE id = :jid AND state = 'running' AND worker = 'client-' || :client_id::text)
UPDATE tasks SET state = 'running', worker = 'client-' || :client_id::text,
	   attempts = attempts + 1
 WHERE id = (SELECT id FROM tasks
			  WHERE queue = 'bench' AND state = 'pending' AND run_at <= now()
			  ORDER BY priority DESC, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id AS jid, payload \gset
\endif
