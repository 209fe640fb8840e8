-- The seeds' exclusive-job lease: an upsert that takes the lease if it is
-- free, expired or already ours, then an owner-checked DELETE.
\set n random(1, :nnames)
WITH g AS (
	INSERT INTO job_locks AS l (job_id, job_instance_id, lock_expires_at)
	VALUES ('lock-' || :n::text, 'client-' || :client_id::text, now() + interval '30 seconds')
	ON CONFLICT (job_id) DO UPDATE
		SET job_instance_id = excluded.job_instance_id,
			lock_expires_at = excluded.lock_expires_at
		WHERE l.lock_expires_at < now() OR l.job_instance_id = excluded.job_instance_id
	RETURNING 1)
SELECT count(*) AS got FROM g \gset
\if :got
DELETE FROM job_locks WHERE job_id = 'lock-' || :n::text AND job_instance_id = 'client-' || :client_id::text;
\endif
