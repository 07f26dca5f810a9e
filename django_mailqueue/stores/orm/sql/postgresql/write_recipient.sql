-- A recipient's outcome (rows.RECIPIENT_WRITTEN, then its id).
UPDATE {recipients} SET state = %b, reply_code = %b, reply_status = %b, reply_text = %b, remote_mta = %b
WHERE id = %b
