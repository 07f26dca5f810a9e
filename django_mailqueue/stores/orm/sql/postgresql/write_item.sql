-- An item left in the store after an outcome (rows.ITEM_WRITTEN, then its seq), its lease let go.
UPDATE {items} SET attempts = %b, next_attempt = %b, revision = %b, delay_warned = %b, failed_at = %b,
    owner = NULL, lease_expires = NULL, reclaims = 0
WHERE seq = %b
