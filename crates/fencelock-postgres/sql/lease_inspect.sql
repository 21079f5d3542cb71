-- $1 key. A read phase's row holds the phase's owner followed by 'read' (migration 6): the
-- holder shown is the phase's fence, its first 16 bytes.
SELECT c.last_token,
       substring(l.owner FROM 1 FOR 16) AS owner,
       l.token,
       GREATEST(0, (EXTRACT(EPOCH FROM (l.expires_at - clock_timestamp())) OPERATOR(pg_catalog.*) 1000000))::bigint
           AS remaining_us,
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
  LEFT JOIN {schema}.fencelock_leases l ON l.key = k.key AND l.expires_at > clock_timestamp()
