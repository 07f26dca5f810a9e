-- An item of add.sql: id, sender, size, created, next_attempt, queue, message_id, subject.
(%s, %s, %s, %s, %s, 0, %s, NULL, NULL, 0, 0, 0, %s, %s)
