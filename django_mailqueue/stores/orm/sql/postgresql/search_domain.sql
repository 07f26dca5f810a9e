-- The items of the recipients at the domain, up to a bound: a range of mailqueue_recipient_domain.
SELECT item_id FROM {recipients} WHERE domain = %s LIMIT %s
