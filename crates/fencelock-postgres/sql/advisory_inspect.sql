-- $1 key. A holder row counts only while its session still holds the advisory lock.
SELECT c.last_token,
       h.owner,
       h.token,
       GREATEST(0, (EXTRACT(EPOCH FROM (h.expires_at - clock_timestamp())) * 1000000))::bigint
           AS remaining_us
  FROM (SELECT $1::text AS key) k
  LEFT JOIN {schema}.fencelock_counters c ON c.key = k.key
  LEFT JOIN {schema}.fencelock_advisory_holders h ON h.key = k.key AND EXISTS (
      SELECT 1 FROM pg_locks pl
       WHERE pl.locktype = 'advisory'
         AND pl.granted
         AND pl.pid = h.pid
         AND pl.database = (SELECT oid FROM pg_database WHERE datname = current_database())
         AND pl.classid = ((h.lock_id >> 32) & 4294967295)::oid
         AND pl.objid = (h.lock_id & 4294967295)::oid
         AND pl.objsubid = 1
  )
