--
-- lease_session: leases bound to a session end with it, without a reaper
--

SELECT distlock.session_open('1 minute', 'a') AS sa \gset
SELECT distlock.session_open('1 minute', 'b') AS sb \gset

-- a session-bound lease blocks other owners while the session lives
SELECT distlock.try_acquire('leader', 'a', NULL, :'sa') AS t1 \gset
SELECT distlock.try_acquire('leader', 'b', NULL, :'sb') IS NULL AS refused;
SELECT name, owner, session_id = :'sa' AS bound FROM distlock.active_locks
 WHERE name = 'leader';

-- closing the session frees the lock at once; b takes it with a new token
SELECT distlock.session_close(:'sa');
SELECT count(*) FROM distlock.active_locks WHERE name = 'leader';
SELECT distlock.renew('leader', 'a');
SELECT distlock.release('leader', 'a');
SELECT distlock.fence('leader', :t1);
SELECT distlock.try_acquire('leader', 'b', '1 minute', :'sb') AS t2 \gset
SELECT :t2 > :t1 AS larger;

-- a session that expires frees its locks before anyone reaps it
SELECT distlock.session_open('500 milliseconds', 'c') AS sc \gset
SELECT distlock.try_acquire('cron', 'c', NULL, :'sc') AS t3 \gset
SELECT distlock.try_acquire('cron', 'b', NULL, :'sb') IS NULL AS refused;
SELECT pg_sleep(0.6);
SELECT count(*) FROM distlock.sessions WHERE id = :'sc';
SELECT count(*) AS shown_held FROM distlock.active_locks WHERE name = 'cron';
SELECT distlock.renew('cron', 'c');
SELECT distlock.try_acquire('cron', 'b', NULL, :'sb') > :t3 AS taken_over;
SELECT distlock.reap();

-- re-entry with a session keeps the token and rebinds the lease
SELECT distlock.session_open('1 minute', 'b2') AS sb2 \gset
SELECT distlock.try_acquire('cron', 'b', NULL, :'sb2') AS t4 \gset
SELECT token = :t4 AS same_token, session_id = :'sb2' AS rebound
  FROM distlock.locks WHERE name = 'cron';
SELECT distlock.session_close(:'sb2');
SELECT count(*) FROM distlock.active_locks WHERE name = 'cron';

-- acquiring through a session that is not live is an error
SELECT distlock.session_open('100 milliseconds') AS sd \gset
SELECT pg_sleep(0.2);
SELECT attempt(format('distlock.try_acquire(%L, %L, %L, %L)', 'x', 'd', '1 minute', :'sd'));
SELECT attempt('distlock.try_acquire(''x'', ''d'', ''1 minute'', ''00000000-0000-0000-0000-000000000000'')');
SELECT count(*) FROM distlock.locks WHERE name = 'x';

-- a session-bound lease with a ttl ends at whichever comes first
SELECT distlock.try_acquire('both', 'b', '100 milliseconds', :'sb') IS NOT NULL AS granted;
SELECT pg_sleep(0.2);
SELECT distlock.try_acquire('both', 'e') IS NOT NULL AS taken_over;

SELECT distlock.session_close(:'sb');
SELECT distlock.reap();
