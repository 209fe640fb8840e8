-- distlock.enqueue of one job.
SELECT distlock.enqueue('enq', '{"to": "ada@example.com"}');
