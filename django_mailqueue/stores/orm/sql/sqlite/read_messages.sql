-- The messages of the items (by id, as 32 hex digits; {marks}: one %s each): the item's id, the message.
SELECT i.id, m.data FROM {messages} m JOIN {items} i ON i.seq = m.item_id WHERE i.id IN ({marks})
