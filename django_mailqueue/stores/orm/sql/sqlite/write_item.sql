-- An item left in the store after an outcome (rows.ITEM_WRITTEN, then its seq), its lease let go.
UPDATE {items} SET attempts = %s, next_attempt = %s, revision = %s, delay_warned = %s, failed_at = %s,
    owner = NULL, lease_expires = NULL, reclaims = 0
WHERE seq = %s
