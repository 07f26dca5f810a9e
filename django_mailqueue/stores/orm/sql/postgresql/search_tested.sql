-- The search tested on each item the list reads in its order (a search too common for the indexes to list):
-- the sender, the subject or a recipient's address holds the pattern. OFFSET 0 keeps the EXISTS a probe of the
-- recipients' (item, position) index per item, never a hash of every matching recipient built first.
({items}.sender ILIKE %s OR {items}.subject ILIKE %s
 OR EXISTS (SELECT 1 FROM {recipients} AS r WHERE r.item_id = {items}.seq AND r.address ILIKE %s OFFSET 0))
