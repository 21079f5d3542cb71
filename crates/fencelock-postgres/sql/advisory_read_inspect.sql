-- $1 key, $2 its advisory lock id. The read phase of the key as the server has it.
-- A reader counts while its row's session holds the shared advisory lock (pg_locks). The
-- phase shown is the one of the live reader with the greatest token (phases overlap only
-- when advance_token, or a token taken by a transaction that was given up, moved the counter
-- during a phase): its fence, how many live readers it has, and the longest time left on
-- their leases. `plain_pid` is a session holding the shared lock without a reader row: a
-- plain `pg_advisory_lock_shared($2)` (or a reader whose grant is committing right now).
WITH sharers AS MATERIALIZED (
    SELECT l.pid FROM pg_locks l
     WHERE l.locktype = 'advisory'
       AND l.granted
       AND l.mode = 'ShareLock'
       AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
       AND l.classid = (($2::bigint >> 32) & 4294967295)::oid
       AND l.objid = ($2::bigint & 4294967295)::oid
       AND l.objsubid = 1
), live AS (
    SELECT r.owner, r.token, r.expires_at
      FROM {schema}.fencelock_advisory_readers r
     WHERE r.key = $1::text AND r.pid IN (SELECT s.pid FROM sharers s)
), newest AS (
    SELECT lv.owner, lv.token FROM live lv ORDER BY lv.token DESC LIMIT 1
)
SELECT n.owner,
       n.token,
       (SELECT count(*) FROM live lv WHERE lv.token = n.token AND lv.owner = n.owner)
           AS readers,
       (SELECT GREATEST(0, max(EXTRACT(EPOCH FROM (lv.expires_at - clock_timestamp())) OPERATOR(pg_catalog.*) 1000000))::bigint
          FROM live lv WHERE lv.token = n.token AND lv.owner = n.owner) AS remaining_us,
       (SELECT min(s.pid) FROM sharers s
         WHERE NOT EXISTS (
             SELECT 1 FROM {schema}.fencelock_advisory_readers r
              WHERE r.key = $1::text AND r.pid = s.pid
         )) AS plain_pid
  FROM (SELECT 1) one
  LEFT JOIN newest n ON true
