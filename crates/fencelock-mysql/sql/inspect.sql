-- ? = lock name, ? = key, ? = key.
-- The key's counter (its last token; none after the volatile state was lost, until the key's
-- next grant), its lease and its read phase. `live` says whether the lease's session
-- still holds the GET_LOCK (a session ended by the server or an operator holds nothing). The
-- phase is the key's readers that are live on the server's clock: their fence (every live
-- reader carries the same one, so `phases` is 1), how many, and the longest time left.
SELECT l.token,
       s.holder_token,
       s.holder_owner,
       TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), s.expires_at) AS remaining_us,
       CAST(s.holder_conn <=> IS_USED_LOCK(?) AS SIGNED) AS live,
       r.phase_token,
       r.phase_owner,
       r.readers,
       r.phases,
       r.remaining_us AS phase_remaining_us
FROM {prefix}counters AS l
LEFT JOIN {prefix}leases AS s ON s.lock_key = l.lock_key
LEFT JOIN (
    SELECT lock_key,
           MIN(phase_token) AS phase_token,
           MIN(phase_owner) AS phase_owner,
           COUNT(*) AS readers,
           COUNT(DISTINCT phase_token, phase_owner) AS phases,
           MAX(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at)) AS remaining_us
    FROM {prefix}readers
    WHERE lock_key = ? AND expires_at > UTC_TIMESTAMP(6)
    GROUP BY lock_key
) AS r ON r.lock_key = l.lock_key
WHERE l.lock_key = ?
