-- $1 key.
SELECT c.last_token,
       l.owner,
       l.token,
       GREATEST(0, (EXTRACT(EPOCH FROM (l.expires_at - clock_timestamp())) * 1000000))::bigint
           AS remaining_us
  FROM (SELECT $1::text AS key) k
  LEFT JOIN {schema}.fencelock_counters c ON c.key = k.key
  LEFT JOIN {schema}.fencelock_leases l ON l.key = k.key AND l.expires_at > clock_timestamp()
