--
-- audit: what the catalog says about distlock's privileges and durability
--

-- the control file: trusted, not relocatable, its own schema
SELECT name, version, superuser, trusted, relocatable, schema
  FROM pg_available_extension_versions WHERE name = 'distlock';

-- everything PUBLIC may do: run the functions (which check roles), read the
-- three views (which filter by role) and nothing else
SELECT kind, object, privilege FROM (
	SELECT 'relation' AS kind, c.relname::text AS object, a.privilege_type AS privilege
	  FROM pg_class c, aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) a
	 WHERE c.relnamespace = 'distlock'::regnamespace AND a.grantee = 0
	UNION ALL
	SELECT 'function', p.oid::regprocedure::text, a.privilege_type
	  FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
	 WHERE p.pronamespace = 'distlock'::regnamespace AND a.grantee = 0
	UNION ALL
	SELECT 'schema', n.nspname::text, a.privilege_type
	  FROM pg_namespace n, aclexplode(coalesce(n.nspacl, acldefault('n', n.nspowner))) a
	 WHERE n.nspname = 'distlock' AND a.grantee = 0
	UNION ALL
	SELECT 'type', t.typname::text, a.privilege_type
	  FROM pg_type t, aclexplode(coalesce(t.typacl, acldefault('T', t.typowner))) a
	 WHERE t.typnamespace = 'distlock'::regnamespace AND a.grantee = 0
	   AND t.typtype = 'e'
) p ORDER BY 1, 2, 3;

-- no SECURITY DEFINER function without a fixed search_path (there are none:
-- the functions switch to the schema owner themselves, see src/exec.c)
SELECT p.oid::regprocedure
  FROM pg_proc p
 WHERE p.pronamespace = 'distlock'::regnamespace AND p.prosecdef
   AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, pg_temp'], false);

-- every table and sequence is WAL-logged and kept by pg_dump
SELECT c.relname, c.relpersistence,
	   c.oid = ANY (e.extconfig) AS dumped
  FROM pg_class c, pg_extension e
 WHERE c.relnamespace = 'distlock'::regnamespace AND c.relkind IN ('r', 'S')
   AND e.extname = 'distlock'
 ORDER BY 1;

-- the views that filter by role are security barriers
SELECT c.relname, c.reloptions
  FROM pg_class c
 WHERE c.relnamespace = 'distlock'::regnamespace AND c.relkind = 'v'
 ORDER BY 1;
