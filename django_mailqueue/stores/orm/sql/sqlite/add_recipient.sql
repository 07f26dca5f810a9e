-- Recipients of added items, a row of add_recipient_row.sql each.
INSERT INTO {recipients} (item_id, position, address, domain, state, reply_status, reply_text, remote_mta)
VALUES {rows}
