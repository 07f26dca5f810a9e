-- Items, a row of add_row.sql each. No RETURNING (it costs SQLite and Python more than the insert): the
-- rows' seqs are their rowids, consecutive and the last one the cursor's `lastrowid` while the table's
-- largest is then the last row's (add_last.sql); else read back by id (add_seqs.sql).
INSERT INTO {items} (id, sender, size, created, next_attempt, attempts, queue, owner, lease_expires,
    revision, reclaims, delay_warned, message_id, subject)
VALUES {rows}
