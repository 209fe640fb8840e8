--
-- session_locks: what a call in flight holds on its session, as monitoring
-- sees it, and calls that see what earlier calls of their statement did
--

SELECT distlock.session_open('1 minute', 'mon') AS m \gset
SELECT distlock.enqueue('mon', '{}') AS mj \gset

-- a claim in an open transaction holds its session's use lock: an advisory
-- lock of distlock's own kind, which pg_describe_object() over pg_locks
-- (as monitoring queries run it) can describe without error
BEGIN;
SELECT count(*) FROM distlock.claim('mon', :'m');
SELECT locktype, mode, objsubid FROM pg_locks
 WHERE pid = pg_backend_pid() AND locktype = 'advisory';
SELECT count(pg_describe_object(classid, objid, objsubid)) >= 0 AS described
  FROM pg_locks WHERE locktype = 'object' AND classid IS NOT NULL;
-- the tag carries 64 bits of the SHA-256 digest of the session id, the key
-- lock_key() computes for the same bytes, and none of the id itself, so
-- that pg_locks, which every role may read, publishes no session's id
SELECT (l.classid::bigint << 32 | l.objid::bigint) =
	   (SELECT ('x' || string_agg(substr(h, i, 2), '' ORDER BY i DESC))::bit(64)::bigint
		  FROM encode(sha256(uuid_send(:'m')), 'hex') h, generate_series(1, 15, 2) i)
	   AS digest_key,
	   position(lpad(to_hex(l.classid::bigint), 8, '0') IN replace(:'m', '-', '')) = 0
	   AND position(lpad(to_hex(l.objid::bigint), 8, '0') IN replace(:'m', '-', '')) = 0
	   AS id_hidden
  FROM pg_locks l
 WHERE l.pid = pg_backend_pid() AND l.locktype = 'advisory' AND l.objsubid = 17409;
COMMIT;
SELECT count(*) AS held_after_commit FROM pg_locks
 WHERE pid = pg_backend_pid() AND locktype = 'advisory';
SELECT distlock.complete(:mj, :'m');

-- a claim in the same statement as the session's close sees the close
SELECT distlock.enqueue('mon', '{}') AS mj2 \gset
SELECT attempt(format('(SELECT distlock.session_close(%L)), (SELECT count(*) FROM distlock.claim(%L, %L))',
					  :'m', 'mon', :'m'));
SELECT distlock.session_close(:'m') AS closed_once;
SELECT status, session_id IS NULL AS unclaimed FROM distlock.jobs WHERE id = :mj2;
SELECT distlock.cancel(:mj2);
