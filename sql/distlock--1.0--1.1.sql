/* distlock/sql/distlock--1.0--1.1.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION distlock UPDATE TO '1.1'" to load this file. \quit

-- Who may act on what another role created is decided in one place, in C
-- (src/access.c): by the functions, by the views (visible), and by the SQL
-- statements the functions run as the schema owner on behalf of the caller
-- (may_act_for).

CREATE FUNCTION distlock.may_act_for(caller regrole, creator regrole)
RETURNS boolean
AS 'MODULE_PATHNAME', 'distlock_may_act_for'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION distlock.may_act_for(regrole, regrole) IS
	'whether caller has the privileges of creator, or of the extension owner';

CREATE OR REPLACE FUNCTION distlock.visible(creator regrole)
RETURNS boolean
AS 'MODULE_PATHNAME', 'distlock_visible'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
