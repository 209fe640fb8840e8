-- PgQ consumer: the next batch of this client's queue, its events, and the
-- batch's acknowledgement.  Batches are cut by the ticker when the
-- benchmark fills the queue (:batch events each); see bench/README.md for
-- how the semantics differ from a job queue's.
SELECT pgq.next_batch('bq' || :client_id::text, 'bench') AS bid \gset
SELECT ev_id, ev_data FROM pgq.get_batch_events(:bid);
SELECT pgq.finish_batch(:bid);
