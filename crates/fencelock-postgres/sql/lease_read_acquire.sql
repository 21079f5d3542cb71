-- $1 key, $2 reader, $3 ttl in microseconds, $4 lock_timeout in ms, $5 the owner drawn for a
-- new read phase (unused when the reader joins a live phase).
-- A reader's grant (fencelock_lease_read_acquire, migration 6): joins the key's live read
-- phase or starts one; returns the phase's token and owner, or NULL with the live epoch and
-- `exhausted` as lease_acquire.sql does. One statement, so it holds behind a transaction
-- pooler: the function's statements run in this statement's one transaction.
-- The function runs only when the schema's lock mechanism (fencelock_bind_mechanism,
-- migration 9) is 'lease'; `bound` returns it, and `r` is empty with another. `OFFSET 0`
-- keeps the lateral subquery whole, so its WHERE, which reads only `s.bound`, is a one-time
-- filter above the function scan (flattened, it would be a join filter evaluated after the
-- function ran).
SELECT r.token, r.owner, r.live, COALESCE(r.exhausted, false) AS exhausted, s.bound
  FROM (SELECT {schema}.fencelock_bind_mechanism('lease') AS bound) s
  LEFT JOIN LATERAL (
      SELECT f.token, f.owner, f.live, f.exhausted
        FROM {schema}.fencelock_lease_read_acquire($1, $2, $3, $4, $5) f
       WHERE s.bound = 'lease'
      OFFSET 0
  ) r ON true
