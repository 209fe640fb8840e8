--
-- advisory: lock_key and the advisory_locks view
--

-- the advisory-lock article's key, computed in Python as
-- struct.unpack('q', hashlib.sha256(name.encode()).digest()[:8])[0]
SELECT distlock.lock_key('hourly_report_generation') = 8458036681634828566 AS matches;

-- more keys computed the same way: the empty name, a non-ASCII name (its
-- UTF-8 bytes are hashed), names whose key is negative
SELECT name, distlock.lock_key(name) FROM (VALUES
	('hourly_report_generation'), (''), ('é'), ('report'), ('nightly-report'), ('a')
) v(name);

-- the same as SHA-256 in SQL, first 8 bytes read little-endian, for many names
SELECT count(*) AS names,
	   count(*) FILTER (WHERE distlock.lock_key(n) <> (
		   SELECT ('x' || string_agg(lpad(to_hex(get_byte(d, b)), 2, '0'), ''
									ORDER BY b DESC))::bit(64)::bigint
			 FROM sha256(convert_to(n, 'UTF8')) d, generate_series(0, 7) b
	   )) AS mismatches,
	   count(DISTINCT distlock.lock_key(n)) AS distinct_keys,
	   count(*) FILTER (WHERE distlock.lock_key(n) < 0) > 0 AS some_negative
  FROM (SELECT md5(i::text) || repeat('é', i % 3) AS n
		  FROM generate_series(1, 500) i) s;

-- pure: usable in an index expression
CREATE TABLE named_jobs (name text PRIMARY KEY);
CREATE INDEX named_jobs_key_idx ON named_jobs (distlock.lock_key(name));
DROP TABLE named_jobs;

-- NULL raises 22004 rather than a NULL key, which pg_try_advisory_lock()
-- would answer with NULL (read as "not acquired")
SELECT attempt('distlock.lock_key(NULL)');

-- the view: nothing held yet
SELECT count(*) FROM distlock.advisory_locks WHERE pid = pg_backend_pid();

-- session locks, both key forms, both modes, the extreme keys
SELECT pg_advisory_lock(distlock.lock_key('hourly_report_generation'));
SELECT pg_advisory_lock(distlock.lock_key('report'));
SELECT pg_advisory_lock(-1);
SELECT pg_advisory_lock_shared(9223372036854775807);
SELECT pg_advisory_lock(-9223372036854775808);
SELECT pg_advisory_lock(1, -2);
SELECT pg_advisory_lock_shared(-2147483648, 2147483647);
SELECT key, key1, key2, mode, granted, waitstart, blocked_by,
	   pid = pg_backend_pid() AS mine,
	   application_name = current_setting('application_name') AS my_application,
	   query = current_query() AS my_query
  FROM distlock.advisory_locks
 ORDER BY key, key1;

-- a key read back from the view finds its name's key
SELECT key = distlock.lock_key('report') AS found
  FROM distlock.advisory_locks WHERE key = distlock.lock_key('report');

-- a lock held twice is one row; released, the rows go
SELECT pg_advisory_lock(-1);
SELECT count(*) FROM distlock.advisory_locks WHERE key = -1;
SELECT pg_advisory_unlock_all();
SELECT count(*) FROM distlock.advisory_locks WHERE pid = pg_backend_pid();

-- transaction-level locks show until the transaction ends
BEGIN;
SELECT pg_advisory_xact_lock(distlock.lock_key('nightly-report'));
SELECT key, mode, granted FROM distlock.advisory_locks WHERE pid = pg_backend_pid();
COMMIT;
SELECT count(*) FROM distlock.advisory_locks WHERE pid = pg_backend_pid();

-- other lock types in pg_locks are not advisory locks
BEGIN;
LOCK TABLE distlock.locks IN ACCESS SHARE MODE;
SELECT count(*) FROM distlock.advisory_locks;
COMMIT;
