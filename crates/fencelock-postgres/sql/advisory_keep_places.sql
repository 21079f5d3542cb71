-- $1 keys, $2 waiters (32 hex digits each), $3 place ttls in microseconds, element by
-- element: the queued waiters of one process on this schema's advisory backend whose place
-- the process's keeper keeps.
-- Keeps the live place of each of these waiters for another of its place ttls: one statement
-- per process and refresh interval, however many waiters it has (DESIGN 5.3, *One refresh
-- per process*). Returns the waiters whose try has something to do now: one whose place is
-- not live any more (it lapsed, or was given up), and, for each key with no live fencelock
-- holder recorded, this process's first place by arrival, which may head the queue of a
-- free lock (a holder's session the server ended notifies nobody). Only UNLOGGED rows are
-- written, so the commit waits for no WAL flush. Every function and operator here resolves
-- in pg_catalog whatever the caller's search_path (qualified, or of exact argument types).
WITH w AS (
    SELECT u.key, pg_catalog.decode(u.hex, 'hex') AS waiter, u.place_us
      FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]),
                      pg_catalog.unnest($3::float8[])) AS u(key, hex, place_us)
), kept AS (
    UPDATE {schema}.fencelock_advisory_places p
       SET lapses_at = clock_timestamp() + w.place_us * interval '1 microsecond'
      FROM w
     WHERE p.key = w.key AND p.waiter = w.waiter AND NOT p.gone
       AND p.lapses_at > clock_timestamp()
    RETURNING p.key, p.waiter, p.arrival
), free AS (
    SELECT DISTINCT ON (k.key) k.waiter
      FROM kept k
     WHERE NOT EXISTS (
         SELECT 1 FROM {schema}.fencelock_advisory_holders h
          WHERE h.key = k.key AND h.expires_at > clock_timestamp()
     )
     ORDER BY k.key, k.arrival
)
SELECT pg_catalog.encode(w.waiter, 'hex') AS waiter FROM w
 WHERE NOT EXISTS (SELECT 1 FROM kept WHERE kept.waiter = w.waiter)
UNION ALL
SELECT pg_catalog.encode(f.waiter, 'hex') FROM free f
