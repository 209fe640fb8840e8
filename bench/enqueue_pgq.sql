-- PgQ insert_event of one event.
SELECT pgq.insert_event('ins', 'job', '{"to": "ada@example.com"}');
