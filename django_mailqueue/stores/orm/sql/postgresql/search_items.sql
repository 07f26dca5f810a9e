-- The items whose subject holds the word (a case-insensitive regular expression, `\y` its bounds), up to a
-- bound: the subject's trigram index.
SELECT seq FROM {items} WHERE subject ~* %s LIMIT %s
