-- A token bucket's take in one statement: core/shaping.take_from_bucket in SQL, the same floating-point
-- operations in the same order. A row keeps the tokens held at its last take, before it, and what that
-- take wanted: it got min(wanted, whole tokens), which RETURNING computes on the row as written.
-- A new bucket is full. On a conflict SET sees the old row. 1e-9: core/shaping.TOKEN_SLACK.
-- Parameters: name, rate, burst, tokens (= burst), wanted (= min(want, burst)), now (microseconds).
INSERT INTO {buckets} (name, rate, burst, tokens, wanted, updated, flying, done) VALUES (%s, %s, %s, %s, %s, %s, '', '')
ON CONFLICT (name) DO UPDATE SET
    tokens = min(excluded.burst,
        {buckets}.tokens - min({buckets}.wanted, CAST({buckets}.tokens + 1e-9 AS INTEGER))
        + (CASE WHEN excluded.updated > {buckets}.updated
            THEN (excluded.updated - {buckets}.updated) * excluded.rate / 1000000.0 ELSE 0.0 END)),
    wanted = excluded.wanted,
    updated = max({buckets}.updated, excluded.updated),
    rate = excluded.rate,
    burst = excluded.burst
RETURNING min(wanted, CAST(tokens + 1e-9 AS INTEGER))
