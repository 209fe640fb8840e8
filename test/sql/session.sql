--
-- session: session_open, heartbeat, session_close, reap
--

SELECT distlock.session_open('10 seconds', 'worker-1', '{"pid": 42}') AS s1 \gset
SELECT owner, info, ttl, expires_at - heartbeat_at AS lease,
	   created_by = current_user::regrole AS by_me
  FROM distlock.live_sessions WHERE id = :'s1';

-- heartbeat extends to now + ttl (live_sessions shows the promise; the
-- row's expires_at is a bound that is never behind it, and ahead of it
-- when heartbeats are kept in shared memory: src/beat.c)
SELECT expires_at AS before FROM distlock.live_sessions WHERE id = :'s1' \gset
SELECT pg_sleep(0.05);
SELECT distlock.heartbeat(:'s1');
SELECT v.expires_at > :'before' AS extended,
	   v.expires_at - v.heartbeat_at AS lease,
	   s.expires_at >= v.expires_at AS row_not_behind
  FROM distlock.live_sessions v JOIN distlock.sessions s USING (id)
 WHERE id = :'s1';

-- defaults: 15 seconds, no owner, no info
SELECT distlock.session_open() AS s2 \gset
SELECT ttl, owner IS NULL AS no_owner, info IS NULL AS no_info
  FROM distlock.sessions WHERE id = :'s2';

-- closing: true once, then false; heartbeat after close is false
SELECT distlock.session_close(:'s2');
SELECT distlock.session_close(:'s2');
SELECT distlock.heartbeat(:'s2');
SELECT count(*) FROM distlock.sessions WHERE id = :'s2';

-- an unknown session: heartbeat and close are false
SELECT distlock.heartbeat('00000000-0000-0000-0000-000000000000');
SELECT distlock.session_close('00000000-0000-0000-0000-000000000000');

-- expiry: heartbeat refuses a session whose time has passed, even though
-- nothing has reaped it, and close refuses it too
SELECT distlock.session_open('100 milliseconds') AS s3 \gset
SELECT pg_sleep(0.2);
SELECT count(*) FROM distlock.live_sessions WHERE id = :'s3';
SELECT distlock.heartbeat(:'s3');
SELECT distlock.session_close(:'s3');
SELECT count(*) FROM distlock.sessions WHERE id = :'s3';

-- reap deletes expired sessions only
SELECT distlock.session_open('100 milliseconds') AS s4 \gset
SELECT pg_sleep(0.2);
SELECT distlock.reap();
SELECT distlock.reap();
SELECT id = :'s1' AS only_s1_left FROM distlock.sessions;
SELECT distlock.session_close(:'s1');
