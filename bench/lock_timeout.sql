-- The seeds' timeout lock: UPDATE ... WHERE the holder's time ran out, then
-- an owner-checked UPDATE to free it.
\set n random(1, :nnames)
WITH g AS (
	UPDATE timeout_locks SET holder = 'client-' || :client_id::text, ts = now()
	 WHERE name = 'lock-' || :n::text AND (holder IS NULL OR ts + timeout < now())
	RETURNING 1)
SELECT count(*) AS got FROM g \gset
\if :got
UPDATE timeout_locks SET holder = NULL
 WHERE name = 'lock-' || :n::text AND holder = 'client-' || :client_id::text;
\endif
