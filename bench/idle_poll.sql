-- An idle worker that polls: claim from a queue that stays empty, then
-- sleep :interval ms.  Each client opens a session of its own on its first
-- run (it expires a while after the run).  For bench/wake.py's idle-cost
-- rows.
\if :have_sid = 0
SELECT distlock.session_open('2 minutes', 'idle-poll') AS sid, 1 AS have_sid \gset
\endif
SELECT id FROM distlock.claim('idle', :sid);
\sleep :interval ms
