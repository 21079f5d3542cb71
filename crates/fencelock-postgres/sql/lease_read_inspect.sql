-- $1 key.
-- The live read phase of the key, if any: its owner and token (a phase row's owner is the
-- phase's 16 bytes followed by 'read', migration 6), how many readers are live, and the time
-- left on the longest of them. No row while no phase lives. Writes nothing.
SELECT substring(l.owner FROM 1 FOR 16) AS owner,
       l.token,
       r.readers,
       GREATEST(0, (EXTRACT(EPOCH FROM (r.latest - clock_timestamp())) OPERATOR(pg_catalog.*) 1000000))::bigint
           AS remaining_us
  FROM {schema}.fencelock_leases l
  CROSS JOIN LATERAL (
      SELECT count(*) AS readers, max(x.expires_at) AS latest
        FROM {schema}.fencelock_lease_readers x
       WHERE x.key = l.key AND x.expires_at > clock_timestamp()
  ) r
 WHERE l.key = $1 AND l.expires_at > clock_timestamp() AND octet_length(l.owner) = 20
