-- The items' rows (by id, as 32 hex digits; {marks}: one %s each), without a lock.
SELECT {item_columns} FROM {items} WHERE id IN ({marks})
