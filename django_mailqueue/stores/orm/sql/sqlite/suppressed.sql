-- The suppression list's entries of addresses (the list's keys; {marks}: one %s each) since a time (µs, the last %s).
SELECT address, reply_code, reply_status, reply_text, since, item_id FROM {suppressed}
WHERE address IN ({marks}) AND since >= %s
