--
-- bad_input: every refusal raises a specific SQLSTATE and changes nothing
--

-- some state to leave untouched
SELECT distlock.session_open('1 hour', 'live') AS live \gset
SELECT distlock.session_open('100 milliseconds', 'dead') AS dead \gset
SELECT distlock.try_acquire('held', 'w1', '1 hour') IS NOT NULL AS held;
SELECT distlock.enqueue('q', '{}') AS job \gset
SELECT pg_sleep(0.2);

SELECT state() AS before \gset

-- fill the placeholders of a call with the ids above
CREATE TEMP TABLE ids AS SELECT :'live'::uuid AS live, :'dead'::uuid AS dead, :job AS job;
CREATE FUNCTION bind(call text) RETURNS text LANGUAGE sql AS $$
	SELECT replace(replace(replace(call,
		'<live>', quote_literal(live)),
		'<dead>', quote_literal(dead)),
		'<job>', job::text)
	  FROM ids
$$;

SELECT call, attempt(bind(call)) AS outcome FROM (VALUES
	-- try_acquire
	('distlock.try_acquire(NULL, ''o'')'),
	('distlock.try_acquire('''', ''o'')'),
	('distlock.try_acquire(repeat(''x'', 256), ''o'')'),
	('distlock.try_acquire(repeat(''é'', 256), ''o'')'),
	('distlock.try_acquire(''n'', NULL)'),
	('distlock.try_acquire(''n'', '''')'),
	('distlock.try_acquire(''n'', repeat(''x'', 256))'),
	('distlock.try_acquire(''n'', ''o'', ''0 seconds'')'),
	('distlock.try_acquire(''n'', ''o'', ''-1 second'')'),
	('distlock.try_acquire(''n'', ''o'', ''1 month -30 days'')'),
	('distlock.try_acquire(''n'', ''o'', ''367 days'')'),
	('distlock.try_acquire(''n'', ''o'', ''1000 years'')'),
	-- judged where they land on the calendar: 143 years, and in the past
	('distlock.try_acquire(''n'', ''o'', ''120000 months -3599999 days'')'),
	('distlock.try_acquire(''n'', ''o'', ''-1000 months 30001 days'')'),
	('distlock.try_acquire(''n'', ''o'', ''1 minute'', min_hold => ''-12 months 365 days'')'),
	('distlock.session_open(''-12 months 363 days'')'),
	-- months of the other sign than days or time: 6 days by one rule,
	-- one by the other; days and time may mix
	('distlock.session_open(''-12 months 366 days'')'),
	('distlock.session_open(''1 month -1 second'')'),
	('distlock.session_close(distlock.session_open(''1 day -1 hour''))'),
	-- 366 days with months of 30 days, over a year on the calendar
	('distlock.session_open(''12 months 6 days'')'),
	('distlock.try_acquire(''n'', ''o'', ''1 minute'', ''00000000-0000-0000-0000-000000000000'')'),
	('distlock.try_acquire(''n'', ''o'', ''1 minute'', <dead>)'),
	('distlock.try_acquire(''n'', ''o'', ''1 minute'', ''not-a-uuid'')'),
	-- renew, release, fence
	('distlock.renew(NULL, ''w1'')'),
	('distlock.renew(''held'', NULL)'),
	('distlock.renew(''held'', ''w1'', ''0 seconds'')'),
	('distlock.renew(''held'', ''w1'', ''-5 minutes'')'),
	('distlock.renew(''held'', ''w1'', ''400 days'')'),
	('distlock.renew('''', ''w1'')'),
	('distlock.release(NULL, ''w1'')'),
	('distlock.release(''held'', NULL)'),
	('distlock.release(''held'', repeat(''x'', 300))'),
	('distlock.fence(NULL, 1)'),
	('distlock.fence(''held'', NULL)'),
	('distlock.fence('''', 1)'),
	('distlock.fence(''missing'', 1)'),
	-- sessions
	('distlock.session_open(NULL)'),
	('distlock.session_open(''0 seconds'')'),
	('distlock.session_open(''-1 hour'')'),
	('distlock.session_open(''2 years'')'),
	('distlock.session_open(''1 minute'', '''')'),
	('distlock.session_open(''1 minute'', repeat(''x'', 256))'),
	('distlock.heartbeat(NULL)'),
	('distlock.session_close(NULL)'),
	-- queue
	('distlock.enqueue(NULL)'),
	('distlock.enqueue('''')'),
	('distlock.enqueue(repeat(''q'', 256))'),
	('distlock.enqueue(''q'', NULL)'),
	('distlock.enqueue(''q'', ''{}'', ''infinity'')'),
	('distlock.enqueue(''q'', ''{}'', ''-infinity'')'),
	('distlock.enqueue(''q'', ''{}'', NULL, NULL)'),
	('distlock.enqueue(''q'', ''{}'', NULL, 0, NULL)'),
	('distlock.enqueue(''q'', ''{}'', NULL, 0, 0)'),
	('distlock.enqueue(''q'', ''{}'', NULL, 0, 1001)'),
	('distlock.enqueue(''q'', ''{}'', NULL, 0, 5, '''')'),
	('distlock.enqueue(''q'', ''{}'', NULL, 0, 5, repeat(''k'', 256))'),
	('distlock.enqueue(''q'', ''not json'')'),
	('distlock.claim(NULL, <live>)'),
	('distlock.claim('''', <live>)'),
	('distlock.claim(''q'', NULL)'),
	('distlock.claim(''q'', <live>, NULL)'),
	('distlock.claim(''q'', <live>, 0)'),
	('distlock.claim(''q'', <live>, -1)'),
	('distlock.claim(''q'', <live>, 1001)'),
	('distlock.claim(''q'', <live>, 1000000000)'),
	('distlock.claim(''q'', <dead>)'),
	('distlock.claim(''q'', ''00000000-0000-0000-0000-000000000000'')'),
	('distlock.complete(NULL, <live>)'),
	('distlock.complete(<job>, NULL)'),
	('distlock.complete(-1, <live>)'),
	('distlock.complete_batch(NULL, <live>)'),
	('distlock.complete_batch(ARRAY[<job>], NULL)'),
	('distlock.complete_batch(ARRAY[<job>, NULL], <live>)'),
	('distlock.complete_batch(array_fill(<job>, ARRAY[1001]), <live>)'),
	('distlock.complete_batch(ARRAY[-1], <live>)'),
	('distlock.complete_and_claim(NULL, <live>)'),
	('distlock.complete_and_claim(<job>, NULL)'),
	('distlock.complete_and_claim(<job>, <live>, NULL, NULL)'),
	('distlock.complete_and_claim(<job>, <live>, NULL, 0)'),
	('distlock.complete_and_claim(<job>, <live>, NULL, 1001)'),
	('distlock.complete_and_claim(-1, <live>)'),
	('distlock.complete_and_claim(<job>, <live>)'),
	('distlock.complete_and_claim(<job>, <dead>)'),
	('distlock.complete_and_claim(<job>, ''00000000-0000-0000-0000-000000000000'')'),
	('distlock.complete_batch_and_claim(NULL, <live>)'),
	('distlock.complete_batch_and_claim(ARRAY[<job>], NULL)'),
	('distlock.complete_batch_and_claim(''{}'', <live>)'),
	('distlock.complete_batch_and_claim(ARRAY[<job>, NULL], <live>)'),
	('distlock.complete_batch_and_claim(array_fill(<job>, ARRAY[1001]), <live>)'),
	('distlock.complete_batch_and_claim(ARRAY[<job>], <live>, NULL, 0)'),
	('distlock.complete_batch_and_claim(ARRAY[<job>], <live>, NULL, 1001)'),
	('distlock.complete_batch_and_claim(ARRAY[-1], <live>)'),
	('distlock.complete_batch_and_claim(ARRAY[<job>], <live>)'),
	('distlock.complete_batch_and_claim(ARRAY[<job>], <dead>)'),
	('distlock.fail(NULL, <live>)'),
	('distlock.fail(<job>, NULL)'),
	('distlock.fail(<job>, <live>, ''e'', ''-1 second'')'),
	('distlock.fail(<job>, <live>, ''e'', ''5 years'')'),
	('distlock.fail(-1, <live>)'),
	('distlock.cancel(NULL)'),
	('distlock.cancel(-1)'),
	-- queues' owners and grants (role 0 is no role: '-')
	('distlock.enqueue(''q'', ''{}'', owner => 0::regrole)'),
	('distlock.claim(''q'', <live>, owner => 0::regrole)'),
	('distlock.grant_queue(NULL, ''claim'', ''pg_monitor'')'),
	('distlock.grant_queue('''', ''claim'', ''pg_monitor'')'),
	('distlock.grant_queue(repeat(''q'', 256), ''claim'', ''pg_monitor'')'),
	('distlock.grant_queue(''q'', NULL, ''pg_monitor'')'),
	('distlock.grant_queue(''q'', '''', ''pg_monitor'')'),
	('distlock.grant_queue(''q'', ''claim,bogus'', ''pg_monitor'')'),
	('distlock.grant_queue(''q'', ''claim'', NULL)'),
	('distlock.grant_queue(''q'', ''claim'', 0::regrole)'),
	('distlock.grant_queue(''q'', ''claim'', ''pg_monitor'', 0::regrole)'),
	('distlock.revoke_queue(NULL, ''claim'', ''pg_monitor'')'),
	('distlock.revoke_queue(repeat(''q'', 256), ''claim'', ''pg_monitor'')'),
	('distlock.revoke_queue(''q'', NULL, ''pg_monitor'')'),
	('distlock.revoke_queue(''q'', ''bogus'', ''pg_monitor'')'),
	('distlock.revoke_queue(''q'', ''claim'', NULL)'),
	('distlock.revoke_queue(''q'', ''claim'', 0::regrole)'),
	('distlock.has_queue_privilege(NULL, ''q'', ''claim'')'),
	('distlock.has_queue_privilege(''pg_monitor'', NULL, ''claim'')'),
	('distlock.has_queue_privilege(''pg_monitor'', repeat(''q'', 256), ''claim'')'),
	('distlock.has_queue_privilege(''pg_monitor'', ''q'', NULL)'),
	('distlock.has_queue_privilege(''pg_monitor'', ''q'', ''bogus'')'),
	('distlock.has_queue_privilege(0::regrole, ''q'', ''claim'')'),
	('distlock.cancel_jobs(NULL)'),
	('distlock.cancel_jobs('''')'),
	('distlock.cancel_jobs(repeat(''q'', 256))'),
	('distlock.cancel_jobs(''q'', 0::regrole)'),
	('distlock.set_limit(NULL, 1)'),
	('distlock.set_limit(''grants'', -1)'),
	('distlock.set_limit(''bogus'', 1)'),
	('distlock.set_limit(''grants'', 1, 0::regrole)')
) v(call);

SELECT state() = :'before' AS unchanged;

-- answers that are "no" rather than errors change nothing either
SELECT distlock.try_acquire('held', 'w2');
SELECT distlock.renew('held', 'w2');
SELECT distlock.release('held', 'w2');
SELECT distlock.heartbeat(:'dead');
SELECT distlock.session_close(:'dead');
SELECT distlock.complete(:job, :'live');
SELECT count(*) FROM distlock.complete_batch(ARRAY[:job]::bigint[], :'live');
SELECT distlock.fail(:job, :'live');
SELECT state() = :'before' AS unchanged;

-- every call that writes is refused in a read-only transaction (25006)
BEGIN READ ONLY;
SELECT call, attempt(bind(call)) AS outcome FROM (VALUES
	('distlock.try_acquire(''held'', ''w1'')'),
	('distlock.renew(''held'', ''w1'')'),
	('distlock.release(''held'', ''w1'')'),
	('distlock.fence(''held'', 1)'),
	('distlock.session_open()'),
	('distlock.heartbeat(<live>)'),
	('distlock.session_close(<live>)'),
	('distlock.reap()'),
	('distlock.enqueue(''q'')'),
	('distlock.claim(''q'', <live>)'),
	('distlock.complete(<job>, <live>)'),
	('distlock.complete_and_claim(<job>, <live>)'),
	('distlock.complete_batch(ARRAY[<job>], <live>)'),
	('distlock.complete_batch_and_claim(ARRAY[<job>], <live>)'),
	('distlock.fail(<job>, <live>)'),
	('distlock.cancel(<job>)')
) v(call);
COMMIT;
SELECT state() = :'before' AS unchanged;

-- the fencing token sequence refuses to wrap around
SELECT last_value AS saved FROM distlock.token_seq \gset
SELECT setval('distlock.token_seq', 9223372036854775807);
SELECT attempt('distlock.try_acquire(''wrap'', ''w1'')');
SELECT setval('distlock.token_seq', :saved);
SELECT state() = :'before' AS unchanged;

-- names of up to 255 characters, counted as characters, are accepted
SELECT distlock.try_acquire(repeat('é', 255), repeat('ö', 255)) IS NOT NULL AS granted;
SELECT distlock.release(repeat('é', 255), repeat('ö', 255));

SELECT distlock.session_close(:'live');
SELECT distlock.reap();
DROP FUNCTION bind(text);
