-- The items of the recipients whose address starts with the text (lowercase, a LIKE prefix), up to a bound:
-- a range of mailqueue_recipient_address_start, read from the index alone.
SELECT item_id FROM {recipients} WHERE lower(address) LIKE %s LIMIT %s
