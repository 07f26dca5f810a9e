-- A message of add_message.sql: item_id (its item's seq), data.
(%s, %s)
