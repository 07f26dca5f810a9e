-- Items, a row of add_row.sql each; the seq of each id comes back for its recipients and message.
INSERT INTO {items} (id, sender, size, created, next_attempt, attempts, queue, owner, lease_expires,
    revision, reclaims, delay_warned, message_id, subject)
VALUES {rows}
RETURNING id, seq
