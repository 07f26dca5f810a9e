-- The messages of added items, a row of add_message_row.sql each.
INSERT INTO {messages} (item_id, data) VALUES {rows}
