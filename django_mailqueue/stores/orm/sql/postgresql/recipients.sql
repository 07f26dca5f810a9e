-- The recipients of the items (by seq), in order.
SELECT {recipient_columns} FROM {recipients} WHERE item_id = ANY(%b) ORDER BY item_id, position
