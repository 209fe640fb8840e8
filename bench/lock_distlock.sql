-- distlock lease: take it, and give it back if we got it.
-- Names are drawn from :nnames (10,000 uncontended, 1 contended).
\set n random(1, :nnames)
SELECT (distlock.try_acquire('lock-' || :n::text, 'client-' || :client_id::text, '30 seconds') IS NOT NULL)::int AS got \gset
\if :got
SELECT distlock.release('lock-' || :n::text, 'client-' || :client_id::text);
\endif
