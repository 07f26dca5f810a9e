-- The largest seq, read in the add's transaction right after add.sql: its last row's when SQLite gave the
-- rows rowids one past the largest (consecutive), not when the largest was already 2**63-1.
SELECT max(seq) FROM {items}
