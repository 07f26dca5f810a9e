-- A recipient of add_recipient.sql: item_id (its item's seq), position, address, domain.
(%s, %s, %s, %s, 'pending', '', '', '')
