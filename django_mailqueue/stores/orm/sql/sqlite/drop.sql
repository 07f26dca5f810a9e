-- Items (by seq; {marks}: one %s each) with their recipients and messages: three statements.
DELETE FROM {messages} WHERE item_id IN ({marks});
DELETE FROM {recipients} WHERE item_id IN ({marks});
DELETE FROM {items} WHERE seq IN ({marks})
