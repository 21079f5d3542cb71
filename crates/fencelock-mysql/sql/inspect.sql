-- ? = lock name, ? = key.
-- The key's counter and its lease; `live` says whether the lease's session still holds the
-- GET_LOCK (a session ended by the server or an operator holds nothing).
SELECT l.token,
       s.holder_token,
       s.holder_owner,
       TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), s.expires_at) AS remaining_us,
       CAST(s.holder_conn <=> IS_USED_LOCK(?) AS SIGNED) AS live
FROM {prefix}locks AS l
LEFT JOIN {prefix}leases AS s ON s.lock_key = l.lock_key
WHERE l.lock_key = ?
