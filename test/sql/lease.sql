--
-- lease: try_acquire, renew, release, fence without sessions
--

-- a first grant returns a token
SELECT distlock.try_acquire('report', 'w1', '30 seconds') AS t1 \gset
SELECT :t1 > 0 AS granted;

-- another owner is refused with NULL, and changes nothing
SELECT distlock.try_acquire('report', 'w2') IS NULL AS refused;
SELECT owner, token = :t1 AS same_token FROM distlock.locks WHERE name = 'report';

-- the holder re-enters: same token, lease now + the new ttl
SELECT distlock.try_acquire('report', 'w1', '1 minute') = :t1 AS same_token;
SELECT expires_at - renewed_at AS lease FROM distlock.locks WHERE name = 'report';

-- renew: only the owner
SELECT distlock.renew('report', 'w2');
SELECT distlock.renew('report', 'w1', '2 minutes');
SELECT expires_at - renewed_at AS lease, token = :t1 AS same_token
  FROM distlock.locks WHERE name = 'report';

-- fence: the current token passes, any other raises
BEGIN;
SELECT distlock.fence('report', :t1);
COMMIT;
SELECT distlock.fence('report', :t1 + 1);
SELECT distlock.fence('report', :t1 - 1);
SELECT distlock.fence('no such lock', 1);

-- the view shows the held lock
SELECT name, owner, token = :t1 AS same_token, remaining > '1 minute' AS remaining
  FROM distlock.active_locks;

-- release: only the owner; afterwards the lock is free and fence refuses
SELECT distlock.release('report', 'w2');
SELECT distlock.release('report', 'w1');
SELECT distlock.release('report', 'w1');
SELECT distlock.renew('report', 'w1');
SELECT distlock.fence('report', :t1);
SELECT count(*) FROM distlock.active_locks;

-- the next grant, to anyone, has a larger token
SELECT distlock.try_acquire('report', 'w2') AS t2 \gset
SELECT :t2 > :t1 AS larger;
SELECT distlock.fence('report', :t1);

-- names are independent; names differing in case or spaces are distinct
SELECT distlock.try_acquire('Report', 'w1') IS NOT NULL AS other_case;
SELECT distlock.try_acquire('report ', 'w1') IS NOT NULL AS trailing_space;

-- NULL ttl: held until released, never expires
SELECT distlock.try_acquire('mutex', 'w1', NULL) IS NOT NULL AS granted;
SELECT expires_at IS NULL AS no_expiry, remaining IS NULL AS no_remaining
  FROM distlock.active_locks WHERE name = 'mutex';
SELECT distlock.try_acquire('mutex', 'w2', NULL) IS NULL AS refused;
-- renewing with a ttl puts an end to it; with NULL takes it away again
SELECT distlock.renew('mutex', 'w1', '10 seconds');
SELECT expires_at IS NOT NULL AS has_expiry FROM distlock.locks WHERE name = 'mutex';
SELECT distlock.renew('mutex', 'w1', NULL);
SELECT expires_at IS NULL AS no_expiry FROM distlock.locks WHERE name = 'mutex';
SELECT distlock.release('mutex', 'w1');

-- expiry, judged on the server clock: once the lease has run out another
-- owner takes it over with a larger token, and the old owner is refused
SELECT distlock.try_acquire('short', 'w1', '100 milliseconds') AS s1 \gset
SELECT pg_sleep(0.2);
SELECT count(*) FROM distlock.active_locks WHERE name = 'short';
SELECT distlock.try_acquire('short', 'w2', '1 minute') AS s2 \gset
SELECT :s2 > :s1 AS larger;
SELECT distlock.renew('short', 'w1');
SELECT distlock.release('short', 'w1');
SELECT distlock.fence('short', :s1);
SELECT distlock.fence('short', :s2);
SELECT owner FROM distlock.locks WHERE name = 'short';

-- an expired lease nobody took: the owner may renew or re-enter it and
-- keeps its token (no other token was issued in between)
SELECT distlock.try_acquire('lapsed', 'w1', '100 milliseconds') AS l1 \gset
SELECT pg_sleep(0.2);
SELECT distlock.fence('lapsed', :l1);
SELECT distlock.renew('lapsed', 'w1', '1 minute');
SELECT token = :l1 AS same_token FROM distlock.active_locks WHERE name = 'lapsed';
SELECT distlock.try_acquire('lapsed', 'w1', '100 milliseconds') = :l1 AS same_token;
SELECT pg_sleep(0.2);
SELECT distlock.try_acquire('lapsed', 'w1') = :l1 AS same_token_again;

-- tokens increase strictly over many grants, whoever takes the lock
DO $$
DECLARE
	prev bigint := 0;
	t bigint;
BEGIN
	FOR i IN 1..50 LOOP
		t := distlock.try_acquire('many', 'w' || (i % 3));
		IF t IS NULL OR t <= prev THEN
			RAISE EXCEPTION 'grant % returned % after %', i, t, prev;
		END IF;
		PERFORM distlock.release('many', 'w' || (i % 3));
		prev := t;
	END LOOP;
END $$;

-- a token from a grant that rolled back is never issued again
BEGIN;
SELECT distlock.try_acquire('rolled back', 'w1') AS r1 \gset
ROLLBACK;
SELECT distlock.try_acquire('rolled back', 'w1') > :r1 AS larger;

-- the lock rows record the granting role
SELECT DISTINCT created_by = current_user::regrole AS by_me FROM distlock.locks;
