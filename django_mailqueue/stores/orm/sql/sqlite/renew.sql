-- A lease renewal in one statement, committed by itself (no write lock held between statements), the ids
-- still the owner's returned. Parameters: lease_expires (microseconds), owner, then the ids as 32 hex
-- digits ({marks}: one %s each).
UPDATE {items} SET lease_expires = %s WHERE owner = %s AND id IN ({marks}) RETURNING id
