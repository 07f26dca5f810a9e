-- The items of the recipients whose address holds the pattern (any case), up to a bound: the trigram index.
SELECT item_id FROM {recipients} WHERE address ILIKE %s LIMIT %s
