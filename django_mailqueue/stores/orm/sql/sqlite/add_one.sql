-- One item alone (add.sql's row without RETURNING, which costs SQLite more than the insert): its seq is the
-- row's rowid, read from the cursor (`lastrowid`). id, sender, size, created, next_attempt, queue, message_id, subject.
INSERT INTO {items} (id, sender, size, created, next_attempt, attempts, queue, owner, lease_expires,
    revision, reclaims, delay_warned, message_id, subject)
VALUES (%s, %s, %s, %s, %s, 0, %s, NULL, NULL, 0, 0, 0, %s, %s)
