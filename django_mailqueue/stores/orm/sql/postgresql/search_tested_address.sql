-- An address start tested on one item row of the probe: that item's recipients read by the (item, position) index
-- (the inner OFFSET 0), then tested. Asked directly, PostgreSQL may read the address index's whole range for
-- each row instead (3,810 entries a row for `erin.edwa` at 1 M items: 47,900 blocks for 1,000 rows).
EXISTS (SELECT 1 FROM (SELECT r.address FROM {recipients} AS r WHERE r.item_id = {items}.seq OFFSET 0) AS a
        WHERE lower(a.address) LIKE %s)
