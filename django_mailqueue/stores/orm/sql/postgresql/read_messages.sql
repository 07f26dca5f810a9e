-- The messages of the items (by id): each whole up to the size given, else only its length.
SELECT i.id, m.item_id, octet_length(m.data), CASE WHEN octet_length(m.data) <= %s THEN m.data END
FROM {messages} m JOIN {items} i ON i.seq = m.item_id
WHERE i.id = ANY(%s)
