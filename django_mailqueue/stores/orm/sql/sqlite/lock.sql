-- The items' rows (by id; {marks}: one %s each) through a write that changes nothing, so the
-- transaction takes SQLite's write lock now, not at a later upgrade that could fail at once.
UPDATE {items} SET revision = revision WHERE id IN ({marks}) RETURNING {item_columns}
