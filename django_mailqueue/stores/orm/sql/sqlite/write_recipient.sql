-- A recipient's outcome (rows.RECIPIENT_WRITTEN, then its id).
UPDATE {recipients} SET state = %s, reply_code = %s, reply_status = %s, reply_text = %s, remote_mta = %s
WHERE id = %s
