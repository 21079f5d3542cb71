-- $1 key, $2 its advisory lock id.
-- The key's queue as the advisory backend grants it (inspect_queue): the fencelock holder
-- whose session holds the advisory lock exclusively (kind 0), the readers whose sessions
-- hold it shared (kind 1, each with its phase's token), then the live places of waiters that
-- have not left (kind 2) by arrival. Each with the time left before it runs out or its place
-- lapses, on the server's clock. A holder or reader row counts only while its session holds
-- the lock (pg_locks), as in advisory_inspect.sql. For operators: it takes nothing and
-- decides nothing.
WITH holding AS MATERIALIZED (
    SELECT l.pid, l.mode FROM pg_locks l
     WHERE l.locktype = 'advisory'
       AND l.granted
       AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
       AND l.classid = (($2::bigint >> 32) & 4294967295)::oid
       AND l.objid = ($2::bigint & 4294967295)::oid
       AND l.objsubid = 1
)
SELECT e.kind, e.who, e.token, t.left_us
  FROM (
      SELECT 0 AS kind, h.owner AS who, h.token, h.expires_at AS until, 0::bigint AS arrival
        FROM {schema}.fencelock_advisory_holders h
       WHERE h.key = $1::text
         AND h.pid IN (SELECT s.pid FROM holding s WHERE s.mode = 'ExclusiveLock')
      UNION ALL
      SELECT 1, r.reader, r.token, r.expires_at, 0
        FROM {schema}.fencelock_advisory_readers r
       WHERE r.key = $1::text
         AND r.pid IN (SELECT s.pid FROM holding s WHERE s.mode = 'ShareLock')
      UNION ALL
      SELECT 2, p.waiter, NULL, p.lapses_at, p.arrival
        FROM {schema}.fencelock_advisory_places p
       WHERE p.key = $1::text AND NOT p.gone AND p.lapses_at > clock_timestamp()
  ) e
  CROSS JOIN LATERAL (
      SELECT GREATEST(0, EXTRACT(EPOCH FROM (e.until - clock_timestamp())) OPERATOR(pg_catalog.*) 1000000)::bigint
          AS left_us
  ) t
 ORDER BY e.kind, e.arrival, e.who
