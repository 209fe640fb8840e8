-- Plain SQL: claim with UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP
-- LOCKED LIMIT n), then mark the claimed tasks completed (with del = 1,
-- delete them).  Two transactions per cycle.
\if :batch = 1
UPDATE tasks SET state = 'running', worker = 'client-' || :client_id::text,
	   attempts = attempts + 1
 WHERE id = (SELECT id FROM tasks
			  WHERE queue = 'bench' AND state = 'pending' AND run_at <= now()
			  ORDER BY priority DESC, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id AS jid, payload \gset
\if :del
DELETE FROM tasks
 WHERE id = :jid AND state = 'running' AND worker = 'client-' || :client_id::text;
\else
UPDATE tasks SET state = 'completed', finished_at = now()
 WHERE id = :jid AND state = 'running' AND worker = 'client-' || :client_id::text;
\endif
\else
WITH c AS (
	UPDATE tasks SET state = 'running', worker = 'client-' || :client_id::text,
		   attempts = attempts + 1
	 WHERE id IN (SELECT id FROM tasks
				   WHERE queue = 'bench' AND state = 'pending' AND run_at <= now()
				   ORDER BY priority DESC, run_at, id LIMIT :batch FOR UPDATE SKIP LOCKED)
	RETURNING id, payload)
SELECT array_agg(id) AS ids, json_agg(payload) AS payloads FROM c \gset
\if :del
DELETE FROM tasks
 WHERE id = ANY(:ids::bigint[]) AND state = 'running'
   AND worker = 'client-' || :client_id::text;
\else
UPDATE tasks SET state = 'completed', finished_at = now()
 WHERE id = ANY(:ids::bigint[]) AND state = 'running'
   AND worker = 'client-' || :client_id::text;
\endif
\endif
