--
-- hostile_path: neither installing distlock nor calling it runs code that a
-- caller's search_path puts in front of the catalog
--

-- an attacker's schema shadowing what the install script and the
-- functions' statements use; each shadow leaves a note in a canary table
CREATE ROLE distlock_attacker;
CREATE SCHEMA evil AUTHORIZATION distlock_attacker;
CREATE TABLE evil.canary (what text);
GRANT INSERT ON evil.canary TO PUBLIC;
SET ROLE distlock_attacker;
CREATE FUNCTION evil.note(what text) RETURNS void LANGUAGE sql
	AS $$ INSERT INTO evil.canary VALUES (what) $$;
CREATE FUNCTION evil.char_length(text) RETURNS integer LANGUAGE sql
	AS $$ SELECT evil.note('char_length'); SELECT 1 $$;
CREATE FUNCTION evil.nextval(regclass) RETURNS bigint LANGUAGE sql
	AS $$ SELECT evil.note('nextval'); SELECT 1::bigint $$;
CREATE FUNCTION evil.clock_timestamp() RETURNS timestamptz LANGUAGE sql
	AS $$ SELECT evil.note('clock_timestamp'); SELECT '2000-01-01'::timestamptz $$;
CREATE FUNCTION evil.pg_extension_config_dump(regclass, text) RETURNS void LANGUAGE sql
	AS $$ SELECT evil.note('pg_extension_config_dump') $$;
CREATE FUNCTION evil.make_interval(years int DEFAULT 0, months int DEFAULT 0,
		weeks int DEFAULT 0, days int DEFAULT 0, hours int DEFAULT 0,
		mins int DEFAULT 0, secs double precision DEFAULT 0) RETURNS interval LANGUAGE sql
	AS $$ SELECT evil.note('make_interval'); SELECT interval '1 second' $$;
CREATE FUNCTION evil.power(numeric, integer) RETURNS numeric LANGUAGE sql
	AS $$ SELECT evil.note('power'); SELECT 1::numeric $$;
CREATE FUNCTION evil.text_eq(text, text) RETURNS boolean LANGUAGE sql
	AS $$ SELECT evil.note('text ='); SELECT $1 OPERATOR(pg_catalog.=) $2 $$;
CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.text_eq);
CREATE FUNCTION evil.uuid_eq(uuid, uuid) RETURNS boolean LANGUAGE sql
	AS $$ SELECT evil.note('uuid ='); SELECT $1 OPERATOR(pg_catalog.=) $2 $$;
CREATE OPERATOR evil.= (LEFTARG = uuid, RIGHTARG = uuid, FUNCTION = evil.uuid_eq);
CREATE FUNCTION evil.int8_eq(bigint, bigint) RETURNS boolean LANGUAGE sql
	AS $$ SELECT evil.note('bigint ='); SELECT $1 OPERATOR(pg_catalog.=) $2 $$;
CREATE OPERATOR evil.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = evil.int8_eq);
CREATE FUNCTION evil.int4_ge(integer, integer) RETURNS boolean LANGUAGE sql
	AS $$ SELECT evil.note('integer >='); SELECT $1 OPERATOR(pg_catalog.>=) $2 $$;
CREATE OPERATOR evil.>= (LEFTARG = integer, RIGHTARG = integer, FUNCTION = evil.int4_ge);
CREATE FUNCTION evil.ts_le(timestamptz, timestamptz) RETURNS boolean LANGUAGE sql
	AS $$ SELECT evil.note('timestamptz <='); SELECT $1 OPERATOR(pg_catalog.<=) $2 $$;
CREATE OPERATOR evil.<= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = evil.ts_le);
CREATE FUNCTION evil.ts_pl(timestamptz, interval) RETURNS timestamptz LANGUAGE sql
	AS $$ SELECT evil.note('timestamptz +'); SELECT $1 OPERATOR(pg_catalog.+) $2 $$;
CREATE OPERATOR evil.+ (LEFTARG = timestamptz, RIGHTARG = interval, FUNCTION = evil.ts_pl);
-- a temporary table named like distlock's
CREATE TEMP TABLE locks (name text, owner text, token bigint);
RESET ROLE;

-- the shadows work: unqualified calls with this search_path reach them
SET search_path = evil, pg_catalog, public;
SELECT char_length('abc') AS shadowed, 'a'::text = 'a'::text AS equal,
	   1::bigint = 1::bigint AS equal_bigint;
RESET search_path;
SELECT what FROM evil.canary ORDER BY what;
TRUNCATE evil.canary;

-- install with the attacker's schema ahead of the catalog
DROP EXTENSION distlock;
SET search_path = evil, pg_catalog, public;
CREATE EXTENSION distlock;
SELECT count(*) AS shadows_run FROM evil.canary;

-- every object belongs to the installer, none to the attacker
SELECT count(*) AS attacker_objects
  FROM pg_depend d
  JOIN pg_class c ON d.classid = 'pg_class'::regclass AND c.oid = d.objid
 WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'distlock')
   AND c.relowner = 'distlock_attacker'::regrole;

-- call every function with the same search_path: results as usual, and no
-- shadow runs
SELECT distlock.session_open('1 minute', 'w') AS s \gset
SELECT distlock.try_acquire('L', 'w', '1 minute', :'s') AS t \gset
SELECT distlock.try_acquire('L', 'other') IS NULL AS refused;
SELECT distlock.renew('L', 'w', '1 minute'), distlock.fence('L', :t) IS NOT NULL AS fenced;
SELECT distlock.release('L', 'w');
SELECT distlock.enqueue('q', '{}', dedup_key => 'k') AS j \gset
SELECT distlock.enqueue('q', '{}', dedup_key => 'k') = :j AS deduplicated;
SELECT count(*) FROM distlock.claim('q', :'s');
SELECT distlock.fail(:j, :'s', 'retry');
UPDATE distlock.jobs SET run_at = pg_catalog.clock_timestamp() WHERE id = :j;
SELECT count(*) FROM distlock.claim('q', :'s');
SELECT distlock.complete(:j, :'s');
SELECT distlock.cancel(distlock.enqueue('q', '{}'));
SELECT distlock.heartbeat(:'s'), distlock.session_close(:'s'), distlock.reap();
SELECT count(*) FROM distlock.active_locks, distlock.live_sessions, distlock.queue_stats;
SELECT count(*) AS shadows_run FROM evil.canary;
SELECT count(*) AS temp_rows FROM locks;

-- a trigger function of the owner's with its own SET search_path keeps it
-- while distlock's statements run (an override search path would hide it)
CREATE SCHEMA trig;
CREATE FUNCTION trig.note() RETURNS text LANGUAGE sql AS $$ SELECT 'noted' $$;
CREATE TABLE trig.log (msg text);
CREATE FUNCTION trig.on_job() RETURNS trigger LANGUAGE plpgsql
SET search_path = trig, pg_catalog AS $$
BEGIN
	INSERT INTO log VALUES (note());
	RETURN NEW;
END $$;
CREATE TRIGGER on_job AFTER INSERT ON distlock.jobs
	FOR EACH ROW EXECUTE FUNCTION trig.on_job();
SELECT distlock.enqueue('trig', '{}') IS NOT NULL AS enqueued;
SELECT msg FROM trig.log;
DROP TRIGGER on_job ON distlock.jobs;
DROP SCHEMA trig CASCADE;

RESET search_path;
DROP TABLE pg_temp.locks;
SET client_min_messages = warning;
DROP SCHEMA evil CASCADE;
RESET client_min_messages;
DROP ROLE distlock_attacker;
