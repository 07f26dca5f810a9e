-- The items' rows, locked for the rest of the transaction.
SELECT {item_columns} FROM {items} WHERE id = ANY(%b) ORDER BY seq FOR UPDATE
