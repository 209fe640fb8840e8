-- The floor of a job cycle of :commits transactions (1 or 2): each makes
-- the smallest change a transaction can make durable, one row of the
-- client's own updated in place by its key, and commits it.  No cycle of
-- as many transactions, each of which changes a row, does less work.
UPDATE floor_rows SET n = n + 1 WHERE id = :client_id;
\if :commits = 2
UPDATE floor_rows SET n = n + 1 WHERE id = :client_id;
\endif
