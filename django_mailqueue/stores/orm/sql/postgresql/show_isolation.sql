-- The isolation level the connection's transactions start at.
SHOW default_transaction_isolation
