-- test/scripts/catalog.sql -- a normalized listing of distlock's catalog
-- entries: member objects, columns, constraints, indexes, views, function
-- definitions, privileges, comments and pg_dump registration.  Two installs
-- with the same listing are the same extension.
WITH ext AS (SELECT oid, extconfig FROM pg_extension WHERE extname = 'distlock'),
rels AS (SELECT c.oid, c.relname FROM pg_class c
		  WHERE c.relnamespace = 'distlock'::regnamespace)
SELECT line FROM (
	SELECT 'member ' || pg_describe_object(d.classid, d.objid, d.objsubid)
	  FROM pg_depend d, ext
	 WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid
	   AND d.deptype = 'e'
	UNION ALL
	SELECT format('column %s.%s #%s %s not null %s default %s', r.relname, a.attname,
				  a.attnum, format_type(a.atttypid, a.atttypmod), a.attnotnull,
				  pg_get_expr(ad.adbin, ad.adrelid))
	  FROM rels r JOIN pg_attribute a ON a.attrelid = r.oid
	  LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
	 WHERE a.attnum > 0 AND NOT a.attisdropped
	UNION ALL
	SELECT format('constraint %s.%s %s', r.relname, co.conname, pg_get_constraintdef(co.oid))
	  FROM rels r JOIN pg_constraint co ON co.conrelid = r.oid
	UNION ALL
	SELECT 'index ' || pg_get_indexdef(i.indexrelid)
	  FROM rels r JOIN pg_index i ON i.indrelid = r.oid
	UNION ALL
	SELECT format('view %s %s', r.relname, pg_get_viewdef(r.oid))
	  FROM rels r JOIN pg_class c ON c.oid = r.oid WHERE c.relkind = 'v'
	UNION ALL
	SELECT format('relation %s kind %s persistence %s acl %s comment %s', c.relname,
				  c.relkind, c.relpersistence, c.relacl, obj_description(c.oid, 'pg_class'))
	  FROM pg_class c WHERE c.relnamespace = 'distlock'::regnamespace
	UNION ALL
	SELECT format('function %s acl %s comment %s %s', p.oid::regprocedure, p.proacl,
				  obj_description(p.oid, 'pg_proc'), pg_get_functiondef(p.oid))
	  FROM pg_proc p WHERE p.pronamespace = 'distlock'::regnamespace
	UNION ALL
	SELECT format('type %s %s', t.typname, (SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
												FROM pg_enum e WHERE e.enumtypid = t.oid))
	  FROM pg_type t WHERE t.typnamespace = 'distlock'::regnamespace AND t.typtype = 'e'
	UNION ALL
	SELECT format('schema acl %s comment %s', n.nspacl, obj_description(n.oid, 'pg_namespace'))
	  FROM pg_namespace n WHERE n.nspname = 'distlock'
	UNION ALL
	SELECT 'dumped ' || unnest(ext.extconfig)::regclass::text FROM ext
) t(line)
ORDER BY line;
