-- A token bucket's take in one statement: core/shaping.take_from_bucket in SQL, the same floating-point
-- operations in the same order. A row keeps the tokens held at its last take, before it, and what that
-- take wanted: it got min(wanted, whole tokens), which RETURNING computes on the row as written.
-- A new bucket is full. On a conflict SET sees the old row; the row lock serialises takers of one bucket.
-- Outside a transaction of the caller's, the take commits without waiting for its WAL flush (`async`:
-- SET LOCAL synchronous_commit off, for this statement's own transaction): the row lock is held until the
-- commit, so a flush each would queue the bucket's takers behind the disk (docs/shaping.md). A crash loses
-- at most the last moment's takes. Inside the caller's transaction the setting is left as it is (NULL).
-- 1e-9: core/shaping.TOKEN_SLACK. Parameters: 'off' or NULL, name, rate, burst, tokens (= burst), wanted
-- (= min(want, burst)), now (microseconds).
WITH async AS (
    SELECT set_config('synchronous_commit', COALESCE(%b::text, current_setting('synchronous_commit')), true)
)
INSERT INTO {buckets} AS b (name, rate, burst, tokens, wanted, updated, flying, done)
SELECT %b::text, %b::double precision, %b::integer, %b::double precision, %b::integer, %b::bigint, '', '' FROM async
ON CONFLICT (name) DO UPDATE SET
    tokens = LEAST(EXCLUDED.burst,
        b.tokens - LEAST(b.wanted, floor(b.tokens + 1e-9)::integer)
        + (CASE WHEN EXCLUDED.updated > b.updated
            THEN (EXCLUDED.updated - b.updated) * EXCLUDED.rate / 1000000.0 ELSE 0.0 END)),
    wanted = EXCLUDED.wanted,
    updated = GREATEST(b.updated, EXCLUDED.updated),
    rate = EXCLUDED.rate,
    burst = EXCLUDED.burst
RETURNING LEAST(wanted, floor(tokens + 1e-9)::integer)
