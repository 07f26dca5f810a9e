-- claim.sql from one queue.
AND queue = %s
