-- A recipient of an added item: item_id (its seq), position, address, domain.
INSERT INTO {recipients} (item_id, position, address, domain, state, reply_status, reply_text, remote_mta)
VALUES (%s, %s, %s, %s, 'pending', '', '', '')
