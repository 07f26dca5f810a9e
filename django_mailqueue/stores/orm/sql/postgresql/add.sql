-- Items, their recipients and their messages, and a NOTIFY waking idle workers, in one statement.
-- Each column comes as one array (the text is the same for any batch); every parameter is binary.
WITH added AS (
    INSERT INTO {items} (id, sender, size, created, next_attempt, attempts,
        queue, revision, reclaims, delay_warned, message_id, subject)
    SELECT i.id, i.sender, i.size, %b, i.next_attempt, 0, i.queue, 0, 0, false, i.message_id, i.subject
    FROM unnest(%b::uuid[], %b::text[], %b::bigint[], %b::bigint[], %b::text[], %b::text[], %b::text[])
        WITH ORDINALITY AS i(id, sender, size, next_attempt, queue, message_id, subject, n)
    ORDER BY i.n
    RETURNING seq, id
), recipients AS (
    INSERT INTO {recipients} (item_id, position, address, domain, state, reply_status, reply_text, remote_mta)
    SELECT added.seq, r.position, r.address, r.domain, 'pending', '', '', ''
    FROM added JOIN unnest(%b::uuid[], %b::smallint[], %b::text[], %b::text[]) AS r(id, position, address, domain)
        ON r.id = added.id
), messages AS (
    INSERT INTO {messages} (item_id, data)
    SELECT added.seq, m.data FROM added JOIN unnest(%b::uuid[], %b::bytea[]) AS m(id, data) ON m.id = added.id
)
SELECT pg_notify(%b, '')
