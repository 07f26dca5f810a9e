-- The earliest due items taken and leased, in one statement (SQLite has one writer at a time).
-- {lane}: claim_lane.sql when claiming from one queue.
UPDATE {items} SET owner = %s, lease_expires = %s, revision = revision + 1,
    reclaims = reclaims + (CASE WHEN owner IS NULL THEN 0 ELSE 1 END)
WHERE seq IN (
    SELECT seq FROM {items}
    WHERE next_attempt <= %s AND (lease_expires IS NULL OR lease_expires <= %s) {lane}
    ORDER BY next_attempt, seq LIMIT %s
)
RETURNING {item_columns}
