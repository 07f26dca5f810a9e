-- lock.sql returning only each row's seq, owner and revision: what shows a change since a claim.
SELECT seq, owner, revision FROM {items} WHERE id = ANY(%b) ORDER BY seq FOR UPDATE
