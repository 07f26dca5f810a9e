-- The names of the queues holding items, sorted, at most %s: one look into the queue index per name.
WITH RECURSIVE names(queue) AS (
  SELECT min(queue) FROM {items}
  UNION ALL
  SELECT (SELECT min(queue) FROM {items} WHERE queue > names.queue) FROM names WHERE names.queue IS NOT NULL
)
SELECT queue FROM names WHERE queue IS NOT NULL LIMIT %s
