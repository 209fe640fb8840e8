-- The seeds' advisory-lock worker: take the first of the pending candidates
-- whose advisory lock we get, double-check its status now that it is
-- locked, mark it running, (work,) mark it completed, unlock.  Candidates
-- are read, and locked, in one statement here; a client loop would take a
-- round trip per candidate.  32 candidates: more than there are clients,
-- so one is always free.
SELECT id AS jid FROM (SELECT id FROM reports WHERE status = 'pending'
						ORDER BY id LIMIT 32) c
 WHERE pg_try_advisory_lock(id) LIMIT 1 \gset
SELECT (status = 'pending')::int AS still_pending, payload FROM reports WHERE id = :jid \gset
\if :still_pending
UPDATE reports SET status = 'running' WHERE id = :jid;
UPDATE reports SET status = 'completed' WHERE id = :jid;
\endif
SELECT pg_advisory_unlock(:jid);
