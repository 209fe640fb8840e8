-- Session advisory lock and unlock: in memory, no WAL, no durability; the
-- lower bound for any table-based lock.
\set n random(1, :nnames)
SELECT pg_try_advisory_lock(:n)::int AS got \gset
\if :got
SELECT pg_advisory_unlock(:n);
\endif
