-- A slice of a large message: from a byte (1 the first), so many bytes, of the item's seq.
SELECT substring(data FROM %s FOR %s) FROM {messages} WHERE item_id = %s
