-- Changes when another connection (any process) commits to the database.
PRAGMA data_version
