-- The message of an added item: item_id (its seq), data.
INSERT INTO {messages} (item_id, data) VALUES (%s, %s)
