-- Plain INSERT of one task.
INSERT INTO tasks (queue, payload) VALUES ('enq', '{"to": "ada@example.com"}') RETURNING id;
