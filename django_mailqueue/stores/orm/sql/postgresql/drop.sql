-- Items (by seq) with their recipients and messages, in one statement: Django's foreign keys on
-- PostgreSQL are checked at commit (and these tables have none in the database).
WITH m AS (DELETE FROM {messages} WHERE item_id = ANY(%b)),
    r AS (DELETE FROM {recipients} WHERE item_id = ANY(%b))
DELETE FROM {items} WHERE seq = ANY(%b)
