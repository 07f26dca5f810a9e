-- The recipients of the items (by seq; {marks}: one %s each), in order: the item's seq, the row's key's
-- position (the dialect makes (seq, position) the row's key: write_recipient.sql), then RECIPIENT_FIELDS' rest.
SELECT item_id, position, address, state, reply_code, reply_status, reply_text, remote_mta FROM {recipients}
WHERE item_id IN ({marks}) ORDER BY item_id, position
