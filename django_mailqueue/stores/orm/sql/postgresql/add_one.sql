-- One item (every send_mail()): as add.sql, with plain parameters and the recipients as a VALUES
-- list of add_one_row.sql — no arrays to dump, no joins to plan.
WITH added AS (
    INSERT INTO {items} (id, sender, size, created, next_attempt, attempts,
        queue, revision, reclaims, delay_warned, message_id, subject)
    VALUES (%b, %b, %b, %b, %b, 0, %b, 0, 0, false, %b, %b)
    RETURNING seq
), recipients AS (
    INSERT INTO {recipients} (item_id, position, address, domain, state, reply_status, reply_text, remote_mta)
    SELECT added.seq, r.position, r.address, r.domain, 'pending', '', '', ''
    FROM added, (VALUES {rows}) AS r(position, address, domain)
), messages AS (
    INSERT INTO {messages} (item_id, data) SELECT added.seq, %b FROM added
)
SELECT pg_notify(%b, '')
