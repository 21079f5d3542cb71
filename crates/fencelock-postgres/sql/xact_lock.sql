-- Inside the caller's transaction. $1 lock id, $2 lock_timeout setting, $3
-- idle_in_transaction_session_timeout setting.
-- Bounds the wait with a transaction-local lock_timeout and the transaction's idle time with a
-- transaction-local idle_in_transaction_session_timeout (a client paused inside the
-- transaction has its session ended, freeing the lock; keepalives cannot do that, a paused
-- process's kernel still answers them), then waits for the transaction-level advisory lock,
-- released with the transaction. The token is taken afterwards, outside this transaction
-- (token_grant.sql).
WITH bounded AS (
    SELECT set_config('lock_timeout', $2, true) AS lock_timeout,
           set_config('idle_in_transaction_session_timeout', $3, true) AS idle
)
SELECT bounded.lock_timeout, bounded.idle, pg_advisory_xact_lock($1)::text AS locked
  FROM bounded
