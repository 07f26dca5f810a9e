-- A lease renewal in one statement, the ids still the owner's returned: committed by itself, so the worker
-- never holds the rows locked between statements (a worker stopped there would keep every other worker from
-- its items past their leases). In its own transaction the commit does not wait for the WAL flush (`async`:
-- SET LOCAL synchronous_commit off, as take_tokens.sql); in the caller's the setting is left as it is (NULL).
-- Parameters: 'off' or NULL, lease_expires (microseconds), ids, owner.
WITH async AS (
    SELECT set_config('synchronous_commit', COALESCE(%b::text, current_setting('synchronous_commit')), true)
)
UPDATE {items} SET lease_expires = %b::bigint
WHERE id = ANY(%b::uuid[]) AND owner = %b::text AND EXISTS (SELECT FROM async)
RETURNING id
