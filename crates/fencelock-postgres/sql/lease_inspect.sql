-- $1 key. A read phase's row holds the phase's owner followed by 'read' (migration 6): the
-- holder shown is the phase's fence, its first 16 bytes.
SELECT c.last_token,
       substring(l.owner FROM 1 FOR 16) AS owner,
       l.token,
       GREATEST(0, (EXTRACT(EPOCH FROM (l.expires_at - clock_timestamp())) OPERATOR(pg_catalog.*) 1000000))::bigint
           AS remaining_us
  FROM (SELECT $1::text AS key) k
  LEFT JOIN {schema}.fencelock_counters c ON c.key = k.key
  LEFT JOIN {schema}.fencelock_leases l ON l.key = k.key AND l.expires_at > clock_timestamp()
