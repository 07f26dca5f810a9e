-- The items whose seq is in the array (the search's candidates): PostgreSQL hashes the array and may walk the
-- list's index testing each entry, where a list of constants would take a plan of its own per count. bigint[]:
-- the column's own type (psycopg sends a list of small ints as int4[], which is neither hashed nor walked).
{items}.seq = ANY(%s::bigint[])
