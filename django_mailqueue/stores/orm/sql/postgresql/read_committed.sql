-- The first statement of every transaction the store runs itself.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED
