--
-- install: the extension's objects and their properties
--
CREATE EXTENSION distlock;

SELECT extname, extversion, extrelocatable FROM pg_extension
 WHERE extname = 'distlock';

-- every function: arguments, result, volatility, strictness, parallel safety
SELECT p.oid::regprocedure AS function, pg_get_function_result(p.oid) AS result,
	   p.provolatile, p.proisstrict, p.proparallel, p.prosecdef, p.prorows,
	   obj_description(p.oid, 'pg_proc') IS NOT NULL AS commented
  FROM pg_proc p
 WHERE p.pronamespace = 'distlock'::regnamespace
 ORDER BY p.proname;

-- and the defaults
SELECT p.proname, pg_get_expr(p.proargdefaults, 0) AS defaults
  FROM pg_proc p
 WHERE p.pronamespace = 'distlock'::regnamespace AND p.pronargdefaults > 0
 ORDER BY p.proname;

-- tables, sequences, indexes and views: all WAL-logged
SELECT c.relname, c.relkind, c.relpersistence
  FROM pg_class c
 WHERE c.relnamespace = 'distlock'::regnamespace
 ORDER BY c.relname;

-- every table's columns, constraints, indexes and triggers
SELECT a.attrelid::regclass AS "table", a.attname,
	   format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull,
	   pg_get_expr(d.adbin, d.adrelid) AS "default"
  FROM pg_attribute a
  JOIN pg_class c ON c.oid = a.attrelid
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE c.relnamespace = 'distlock'::regnamespace AND c.relkind = 'r'
   AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY c.relname, a.attnum;

SELECT conrelid::regclass AS "table", conname,
	   pg_get_constraintdef(oid) AS definition
  FROM pg_constraint
 WHERE connamespace = 'distlock'::regnamespace AND conrelid <> 0
   AND contype <> 'n'			-- PostgreSQL 18's NOT NULL constraints: attnotnull above
 ORDER BY conrelid::regclass::text, conname;

SELECT indexrelid::regclass AS index, pg_get_indexdef(indexrelid) AS definition
  FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
 WHERE c.relnamespace = 'distlock'::regnamespace
 ORDER BY 1;

SELECT tgrelid::regclass AS "table", tgname, tgenabled,
	   pg_get_triggerdef(oid) AS definition
  FROM pg_trigger
 WHERE tgrelid = ANY (SELECT oid FROM pg_class
					  WHERE relnamespace = 'distlock'::regnamespace)
 ORDER BY 1, 2;

-- the sequences: types and bounds (a token or job id never wraps)
SELECT seqrelid::regclass AS sequence, seqtypid::regtype AS type, seqstart,
	   seqincrement, seqmax, seqmin, seqcache, seqcycle
  FROM pg_sequence
 WHERE seqrelid = ANY (SELECT oid FROM pg_class
					   WHERE relnamespace = 'distlock'::regnamespace)
 ORDER BY 1;

-- every table and sequence holding user data is kept by pg_dump, whole
SELECT d.dumped::regclass, d.condition
  FROM pg_extension e, unnest(e.extconfig, e.extcondition) AS d(dumped, condition)
 WHERE e.extname = 'distlock' ORDER BY 1;

-- PUBLIC has no privilege on any table or sequence; it may read the views
-- that show each role only its own rows
SELECT c.relname, a.privilege_type
  FROM pg_class c, aclexplode(c.relacl) a
 WHERE c.relnamespace = 'distlock'::regnamespace AND a.grantee = 0
 ORDER BY 1;

SELECT enum_range(NULL::distlock.job_status);

-- the schema must not exist beforehand: nobody can plant objects in it
DROP EXTENSION distlock;
CREATE SCHEMA distlock;
CREATE EXTENSION distlock;
DROP SCHEMA distlock;
CREATE EXTENSION distlock;

-- helper for later tests: run one call, returning its SQLSTATE and message
-- (session ids masked, since they differ on every run)
CREATE FUNCTION attempt(call text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE 'SELECT ' || call;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' ||
		regexp_replace(SQLERRM, '[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}',
					   '<session>', 'g');
END $$;

-- helper for later tests: a digest of every row distlock keeps, to show
-- that a refusal changed nothing
CREATE FUNCTION state() RETURNS text LANGUAGE sql AS $$
	SELECT md5(string_agg(x, ',' ORDER BY x))
	  FROM (SELECT l::text FROM distlock.locks l
			UNION ALL SELECT s::text FROM distlock.sessions s
			UNION ALL SELECT j::text FROM distlock.jobs j
			UNION ALL SELECT t::text FROM distlock.throttles t
			UNION ALL SELECT g::text FROM distlock.queue_grants g) t(x)
$$;
