-- lock.sql returning only each row's seq, owner and revision: what shows a change since a claim.
UPDATE {items} SET revision = revision WHERE id IN ({marks}) RETURNING seq, owner, revision
