-- The items' rows, without a lock.
SELECT {item_columns} FROM {items} WHERE id = ANY(%b) ORDER BY seq
