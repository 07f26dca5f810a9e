-- The items whose sender or subject holds the pattern (any case), up to a bound: the trigram index.
SELECT seq FROM {items} WHERE sender ILIKE %s OR subject ILIKE %s LIMIT %s
