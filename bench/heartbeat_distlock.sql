-- distlock heartbeat of this client's session.
\if :have_sid = 0
SELECT bench_sid(:client_id) AS sid, 1 AS have_sid \gset
\endif
SELECT distlock.heartbeat(:sid);
