-- The seqs of items just added, by id (add.sql's rows when add_last.sql says they are not consecutive).
SELECT id, seq FROM {items} WHERE id IN ({rows})
