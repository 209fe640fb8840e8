/* distlock/sql/distlock--1.0--1.1.sql */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION distlock UPDATE TO '1.1'" to load this file. \quit

-- 1.1 changes no SQL object.  It exists so that the upgrade path is built
-- and tested (test/scripts/upgrade.sh) before the first change needs it.
