-- claim.sql from one queue.
AND queue = %b
