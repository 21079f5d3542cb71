-- $1 key, $2 its advisory lock id. A holder row counts only while its session still holds the
-- advisory lock. `lock_pid` is whichever session holds that lock, fencelock's or not: a plain
-- `pg_advisory_lock($2)` (or a fencelock transaction, which keeps no holder row) shows there.
SELECT c.last_token,
       h.owner,
       h.token,
       GREATEST(0, (EXTRACT(EPOCH FROM (h.expires_at - clock_timestamp())) OPERATOR(pg_catalog.*) 1000000))::bigint
           AS remaining_us,
       (SELECT pl.pid FROM pg_locks pl
         WHERE pl.locktype = 'advisory'
           AND pl.granted
           AND pl.mode = 'ExclusiveLock'
           AND pl.database = (SELECT oid FROM pg_database WHERE datname = current_database())
           AND pl.classid = (($2::bigint >> 32) & 4294967295)::oid
           AND pl.objid = ($2::bigint & 4294967295)::oid
           AND pl.objsubid = 1
         LIMIT 1) AS lock_pid,
       -- With no counter row, what the epochs say may have been granted (DESIGN 5.3, "Lowering a
       -- fence"): every token of the epochs before the live one when the live epoch is past 0,
       -- and of the durable epoch too when none is live (the counters were lost).
       CASE WHEN c.last_token IS NULL THEN
           (SELECT CASE
                       WHEN l.epoch IS NOT NULL THEN
                           CASE WHEN l.epoch OPERATOR(pg_catalog.>) 0
                                THEN (l.epoch OPERATOR(pg_catalog.<<) 32) OPERATOR(pg_catalog.-) 1
                           END
                       WHEN d.epoch IS NOT NULL THEN
                           ((d.epoch OPERATOR(pg_catalog.+) 1) OPERATOR(pg_catalog.<<) 32)
                               OPERATOR(pg_catalog.-) 1
                   END
              FROM {schema}.fencelock_epoch d
              LEFT JOIN {schema}.fencelock_epoch_live l ON l.one
             WHERE d.one)
       END AS granted_at_most
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
