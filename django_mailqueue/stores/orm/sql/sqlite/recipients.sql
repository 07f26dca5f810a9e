-- The recipients of the items (by seq; {marks}: one %s each), in order.
SELECT {recipient_columns} FROM {recipients} WHERE item_id IN ({marks}) ORDER BY item_id, position
