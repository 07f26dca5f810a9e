-- A recipient's outcome (rows.RECIPIENT_WRITTEN, then its row's key: its item's seq and its position), by the
-- table's primary key (migration 0022; before it, by its unique index of the same columns).
UPDATE {recipients} SET state = %s, reply_code = %s, reply_status = %s, reply_text = %s, remote_mta = %s
WHERE item_id = %s AND position = %s
