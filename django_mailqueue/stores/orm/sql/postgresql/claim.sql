-- The earliest due items taken and leased; the inner SELECT locks them with SKIP LOCKED, so
-- concurrent claimers pass each other by. {lane}: claim_lane.sql when claiming from one queue.
UPDATE {items} SET owner = %b, lease_expires = %b, revision = revision + 1,
    reclaims = reclaims + (CASE WHEN owner IS NULL THEN 0 ELSE 1 END)
WHERE seq IN (
    SELECT seq FROM {items}
    WHERE next_attempt <= %b AND (lease_expires IS NULL OR lease_expires <= %b) {lane}
    ORDER BY next_attempt, seq LIMIT %b FOR UPDATE SKIP LOCKED
)
RETURNING {item_columns}
