-- The first statement of a renewal's transaction: its commit does not wait for the WAL flush.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED; SET LOCAL synchronous_commit TO OFF
