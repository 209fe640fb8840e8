--
-- tokens: fencing tokens keep their order whatever is done to the sequence
-- they come from
--

-- a sequence that could hand out tokens out of order is refused: cached
-- values, a step downwards, wrapping around, restarting after a crash
ALTER SEQUENCE distlock.token_seq CACHE 20;
SELECT attempt('distlock.try_acquire(''tok'', ''a'')');
ALTER SEQUENCE distlock.token_seq CACHE 1 INCREMENT -1;
SELECT attempt('distlock.try_acquire(''tok'', ''a'')');
ALTER SEQUENCE distlock.token_seq INCREMENT 1 CYCLE;
SELECT attempt('distlock.try_acquire(''tok'', ''a'')');
ALTER SEQUENCE distlock.token_seq NO CYCLE;
ALTER SEQUENCE distlock.token_seq SET UNLOGGED;
SELECT attempt('distlock.try_acquire(''tok'', ''a'')');
ALTER SEQUENCE distlock.token_seq SET LOGGED;
SELECT count(*) AS granted FROM distlock.locks WHERE name = 'tok';

-- restored, grants go on from above every token handed out
SELECT distlock.try_acquire('tok', 'a') >
	   (SELECT max(token) FROM distlock.locks WHERE name <> 'tok') AS larger;
SELECT distlock.release('tok', 'a');
