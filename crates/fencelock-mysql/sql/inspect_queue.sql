-- ? = key, ? = key.
-- The key's live readers (kind 0, with the phase's token) and then its live queued waiters
-- (kind 1) in arrival order, each with the time left before it runs out or its place lapses
-- on the server's clock. For operators (inspect_queue): it takes nothing and decides nothing.
SELECT kind, who, token, left_us
FROM (
    SELECT CAST(0 AS SIGNED) AS kind,
           reader AS who,
           phase_token AS token,
           TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) AS left_us,
           CAST(0 AS SIGNED) AS arrival
    FROM {prefix}readers
    WHERE lock_key = ? AND expires_at > UTC_TIMESTAMP(6)
    UNION ALL
    SELECT CAST(1 AS SIGNED),
           waiter,
           CAST(NULL AS SIGNED),
           TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), lapses_at),
           CAST(arrival AS SIGNED)
    FROM {prefix}queue
    WHERE lock_key = ? AND lapses_at > UTC_TIMESTAMP(6)
) AS entries
ORDER BY kind, arrival
