-- ? = lock name, ? = key.
-- The key's counter and its lease; `live` says whether the recorded holder session still holds
-- the GET_LOCK (a session ended by the server or an operator holds nothing).
SELECT token,
       holder_token,
       holder_owner,
       TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) AS remaining_us,
       CAST(holder_conn <=> IS_USED_LOCK(?) AS SIGNED) AS live
FROM {prefix}locks
WHERE lock_key = ?
