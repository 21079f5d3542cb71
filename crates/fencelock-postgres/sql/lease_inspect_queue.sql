-- $1 key.
-- The key's queue as the lease backend grants it (inspect_queue): the live exclusive lease
-- (kind 0), or the live readers of a live read phase (kind 1, each with the phase's token: a
-- phase row's owner is 20 bytes, migration 6), then the live places of waiters that have not
-- left (kind 2) by arrival. Each with the time left before it runs out or its place lapses,
-- on the server's clock. For operators: it takes nothing and decides nothing.
SELECT e.kind, e.who, e.token, t.left_us
  FROM (
      SELECT 0 AS kind, l.owner AS who, l.token, l.expires_at AS until, 0::bigint AS arrival
        FROM {schema}.fencelock_leases l
       WHERE l.key = $1 AND l.expires_at > clock_timestamp() AND octet_length(l.owner) = 16
      UNION ALL
      SELECT 1, r.reader, l.token, r.expires_at, 0
        FROM {schema}.fencelock_leases l
        JOIN {schema}.fencelock_lease_readers r ON r.key = l.key
       WHERE l.key = $1 AND l.expires_at > clock_timestamp() AND octet_length(l.owner) = 20
         AND r.expires_at > clock_timestamp()
      UNION ALL
      SELECT 2, p.waiter, NULL, p.lapses_at, p.arrival
        FROM {schema}.fencelock_lease_places p
       WHERE p.key = $1 AND NOT p.gone AND p.lapses_at > clock_timestamp()
  ) e
  CROSS JOIN LATERAL (
      SELECT GREATEST(0, EXTRACT(EPOCH FROM (e.until - clock_timestamp())) OPERATOR(pg_catalog.*) 1000000)::bigint
          AS left_us
  ) t
 ORDER BY e.kind, e.arrival, e.who
