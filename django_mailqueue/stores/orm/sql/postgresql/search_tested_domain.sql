-- A `@domain` term tested on one item row of the probe (`search_probe`): OFFSET 0 keeps the EXISTS a probe of the
-- recipients' (item, position) index per item, never a hash of every recipient of the domain built first.
EXISTS (SELECT 1 FROM {recipients} AS r WHERE r.item_id = {items}.seq AND r.domain = %s OFFSET 0)
