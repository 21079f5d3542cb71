-- Runs on the connection that will hold the lease.
-- $1 lock id, $2 key, $3 owner, $4 ttl in microseconds, $5 idle_session_timeout in ms.
-- A plain try: advisory_grant.sql's grant. It does not queue and does not pass the queue:
-- while a waiter holds a live place (migration 16) the lock is not tried, as if held
-- (DESIGN 4.0.1).
WITH queue_clear AS (
    SELECT NOT EXISTS (
        SELECT 1 FROM {schema}.fencelock_advisory_places p
         WHERE p.key = $2 AND NOT p.gone AND p.lapses_at > clock_timestamp()
    ) AS clear
),
{advisory_grant}
SELECT got, token, armed, live, exhausted, bound FROM plain
