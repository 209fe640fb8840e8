--
-- throttle: rate limits (a token bucket per name) and throttle_status
--

-- burst permits at once, then refusals; the first call creates the bucket
SELECT distlock.throttle('report', '1 hour', 3) AS first,
	   distlock.throttle('report', '1 hour', 3) AS second,
	   distlock.throttle('report', '1 hour', 3) AS third,
	   distlock.throttle('report', '1 hour', 3) AS fourth;
SELECT name, every, burst, permits, refilled_at < granted_at AS refilled_before,
	   created_by = current_user::regrole AS by_me
  FROM distlock.throttles WHERE name = 'report';

-- burst defaults to 1: at most one call per every
SELECT distlock.throttle('once', '1 hour') AS first,
	   distlock.throttle('once', '1 hour') AS second;

-- names are compared byte for byte
SELECT distlock.throttle('Report', '1 hour', 3) AS other_case,
	   distlock.throttle('report ', '1 hour', 3) AS trailing_space;

-- a refusal writes nothing: not the row, not even a transaction id
SELECT t::text AS before FROM distlock.throttles t WHERE name = 'report' \gset
BEGIN;
SELECT distlock.throttle('report', '1 hour', 3) AS refused;
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid;
COMMIT;
SELECT t::text = :'before' AS unchanged FROM distlock.throttles t WHERE name = 'report';

-- while a grant takes one, in a transaction of its own
BEGIN;
SELECT distlock.throttle('fresh', '1 hour') AS granted;
SELECT pg_current_xact_id_if_assigned() IS NOT NULL AS has_xid;
COMMIT;

-- status: nothing left, the next permit in just under an hour
SELECT available, next_in > '59 minutes' AND next_in <= '1 hour' AS next_in_an_hour,
	   every, burst
  FROM distlock.throttle_status('report');
SELECT available, next_in, every, burst FROM distlock.throttle_status('Report');

-- permits come back one per every, on the server clock
SELECT distlock.throttle('tick', '500 milliseconds', 2) AS first,
	   distlock.throttle('tick', '500 milliseconds', 2) AS second,
	   distlock.throttle('tick', '500 milliseconds', 2) AS third;
SELECT pg_sleep(0.6);
SELECT available, next_in FROM distlock.throttle_status('tick');
SELECT distlock.throttle('tick', '500 milliseconds', 2) AS refilled,
	   distlock.throttle('tick', '500 milliseconds', 2) AS empty_again;

-- a full bucket gains nothing while it waits: never more than burst
SELECT distlock.throttle('cap', '300 milliseconds', 2) AS first,
	   distlock.throttle('cap', '300 milliseconds', 2) AS second;
SELECT pg_sleep(1);
SELECT available, next_in FROM distlock.throttle_status('cap');
SELECT distlock.throttle('cap', '300 milliseconds', 2) AS first,
	   distlock.throttle('cap', '300 milliseconds', 2) AS second,
	   distlock.throttle('cap', '300 milliseconds', 2) AS third;

-- nor does the part of a period it waited past full: a grant from a
-- bucket refilled to exactly burst (its last refill set back by hand an
-- hour and a half, so one period and a half have passed) restarts the
-- refill from the grant
SELECT distlock.throttle('brim', '1 hour') AS first;
UPDATE distlock.throttles SET refilled_at = refilled_at - interval '90 minutes'
 WHERE name = 'brim';
SELECT distlock.throttle('brim', '1 hour') AS refilled;
SELECT permits, refilled_at = granted_at AS refill_restarted
  FROM distlock.throttles WHERE name = 'brim';

-- the clock is read at the call, not at the start of the transaction
BEGIN;
SELECT distlock.throttle('late', '300 milliseconds') AS first;
SELECT pg_sleep(0.4);
SELECT distlock.throttle('late', '300 milliseconds') AS after_every;
COMMIT;

-- a later call with another burst keeps the permits left, never more than
-- its own burst
SELECT distlock.throttle('grow', '1 hour', 2) AS granted;
SELECT distlock.throttle('grow', '1 hour', 5) AS one_left,
	   distlock.throttle('grow', '1 hour', 5) AS none_left;
SELECT available, every, burst FROM distlock.throttle_status('grow');
SELECT distlock.throttle('shrink', '1 hour', 5) AS granted;
SELECT permits FROM distlock.throttles WHERE name = 'shrink';
SELECT distlock.throttle('shrink', '1 hour', 2) AS first,
	   distlock.throttle('shrink', '1 hour', 2) AS second,
	   distlock.throttle('shrink', '1 hour', 2) AS third;
SELECT available, every, burst FROM distlock.throttle_status('shrink');

-- and with another every, refills at that every from the last refill
SELECT distlock.throttle('rate', '1 hour') AS granted;
SELECT pg_sleep(0.2);
SELECT distlock.throttle('rate', '1 hour') AS hourly,
	   distlock.throttle('rate', '100 milliseconds') AS faster,
	   distlock.throttle('rate', '100 milliseconds') AS spent;
SELECT available, every, burst FROM distlock.throttle_status('rate');

-- the extremes: a million permits refilled once a year, and one microsecond
SELECT distlock.throttle('huge', '366 days', 1000000) AS granted;
SELECT available, next_in, every, burst FROM distlock.throttle_status('huge');
SELECT distlock.throttle('tiny', '1 microsecond') AS granted;
SELECT distlock.throttle('month', '1 mon') AS granted;
SELECT every FROM distlock.throttle_status('month');

-- bad input: a specific SQLSTATE, and nothing changes
SELECT state() AS before \gset
SELECT call, attempt(call) AS outcome FROM (VALUES
	('distlock.throttle(NULL, ''1 hour'')'),
	('distlock.throttle('''', ''1 hour'')'),
	('distlock.throttle(repeat(''x'', 256), ''1 hour'')'),
	('distlock.throttle(repeat(''é'', 256), ''1 hour'')'),
	('distlock.throttle(''n'', NULL)'),
	('distlock.throttle(''n'', ''0 seconds'')'),
	('distlock.throttle(''n'', ''-1 second'')'),
	('distlock.throttle(''n'', ''1 month -30 days'')'),
	('distlock.throttle(''n'', ''367 days'')'),
	('distlock.throttle(''n'', ''1000 years'')'),
	('distlock.throttle(''n'', ''1 hour'', NULL)'),
	('distlock.throttle(''n'', ''1 hour'', 0)'),
	('distlock.throttle(''n'', ''1 hour'', -1)'),
	('distlock.throttle(''n'', ''1 hour'', 1000001)'),
	('distlock.throttle(''report'', ''1 hour'', 0)'),
	('distlock.throttle_status(NULL)'),
	('distlock.throttle_status('''')'),
	('distlock.throttle_status(repeat(''x'', 256))'),
	('distlock.throttle_status(''never used'')')
) v(call);
SELECT state() = :'before' AS unchanged;

-- throttle writes, so a read-only transaction refuses it (25006), even
-- when it would refuse; throttle_status only reads
BEGIN READ ONLY;
SELECT attempt('distlock.throttle(''report'', ''1 hour'', 3)');
SELECT attempt('distlock.throttle(''read only'', ''1 hour'')');
SELECT available FROM distlock.throttle_status('report');
COMMIT;
SELECT state() = :'before' AS unchanged;

-- names of up to 255 characters, counted as characters, are accepted
SELECT distlock.throttle(repeat('é', 255), '1 hour') AS granted;
SELECT available FROM distlock.throttle_status(repeat('é', 255));


-- a throttle belongs to a role: the same name is another bucket to another
-- role, and a role draws on a role's throttle only with its privileges
CREATE ROLE throttle_alice;
CREATE ROLE throttle_bob;
CREATE ROLE throttle_shared;
GRANT throttle_shared TO throttle_alice, throttle_bob;
GRANT USAGE ON SCHEMA distlock TO throttle_alice, throttle_bob;
SET ROLE throttle_alice;
SELECT distlock.throttle('api', '1 hour') AS alice_first,
	   distlock.throttle('api', '1 hour') AS alice_second;
SET ROLE throttle_bob;
SELECT distlock.throttle('api', '1 hour') AS bob_first;
SELECT attempt('distlock.throttle(''api'', ''1 hour'', owner => ''throttle_alice'')');
SELECT attempt('distlock.throttle_status(''api'', ''throttle_alice'')');
SELECT attempt('distlock.throttle(''api'', ''1 hour'', owner => 12345::oid::regrole)');
-- a limit shared through a group role
SELECT distlock.throttle('shared-api', '1 hour', 2, 'throttle_shared') AS bob_shared;
SET ROLE throttle_alice;
SELECT distlock.throttle('shared-api', '1 hour', 2, 'throttle_shared') AS alice_shared,
	   distlock.throttle('shared-api', '1 hour', 2, 'throttle_shared') AS alice_shared_again;
SELECT available FROM distlock.throttle_status('shared-api', 'throttle_shared');
RESET ROLE;
SELECT owner, name, created_by FROM distlock.throttles
 WHERE name IN ('api', 'shared-api') ORDER BY name, owner::text;
DELETE FROM distlock.throttles WHERE owner::text LIKE 'throttle\_%';
REVOKE USAGE ON SCHEMA distlock FROM throttle_alice, throttle_bob;
DROP ROLE throttle_alice, throttle_bob, throttle_shared;

-- a row added by hand (a restore writes rows directly) with an every that
-- throttle() would have refused: throttle_status() says so (XX001) instead
-- of dividing by it
INSERT INTO distlock.throttles (owner, name, every, burst, permits,
		refilled_at, granted_at, created_by)
	VALUES (current_user::regrole, 'by hand', '0', 1, 0, now(), now(),
			current_user::regrole);
SELECT attempt('distlock.throttle_status(''by hand'')');
UPDATE distlock.throttles SET every = '1 hour', refilled_at = '-infinity'
 WHERE name = 'by hand';
SELECT attempt('distlock.throttle(''by hand'', ''1 hour'')');
DELETE FROM distlock.throttles WHERE name = 'by hand';
