-- The floor: a round trip that does nothing.
SELECT 1;
