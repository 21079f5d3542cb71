-- Runs on the connection that will hold the reader's shared lock.
-- $1 lock id, $2 key, $3 reader id, $4 owner for a new phase, $5 ttl in microseconds,
-- $6 idle_session_timeout in ms, $7 lock_timeout in ms.
-- fencelock_advisory_read (migration 7) takes the shared advisory lock without waiting and
-- joins the key's live read phase or starts a new one with the next token; only when the
-- reader got a token, idle_session_timeout is armed so that the server ends this session
-- (freeing its shared lock) if the client goes silent for longer than the ttl.
-- `got` false: a writer holds the lock or waits for it. `got` with no token: the shared lock
-- was given back; `live` NULL or `exhausted` say to start a new epoch and ask again.
-- Every table written is UNLOGGED: the commit waits for no WAL flush (DESIGN 5.3).
-- The function (and with it the shared lock) runs only when the schema's lock mechanism
-- (fencelock_bind_mechanism, migration 9) is 'advisory'; with another, `got` is false and
-- `bound` says why. `OFFSET 0` keeps the lateral subquery whole, so its WHERE, which reads
-- only `s.bound`, is a one-time filter above the function scan (flattened, it would be a
-- join filter evaluated after the function ran).
SELECT COALESCE(r.r_got, false) AS got,
       r.r_token AS token,
       r.r_owner AS owner,
       CASE WHEN r.r_token IS NOT NULL
            THEN set_config('idle_session_timeout', $6, false) END AS armed,
       r.r_live AS live,
       COALESCE(r.r_exhausted, false) AS exhausted,
       s.bound
  FROM (SELECT {schema}.fencelock_bind_mechanism('advisory') AS bound) s
  LEFT JOIN LATERAL (
      SELECT f.r_got, f.r_token, f.r_owner, f.r_live, f.r_exhausted
        FROM {schema}.fencelock_advisory_read($1, $2, $3, $4, $5, $7) f
       WHERE s.bound = 'advisory'
      OFFSET 0
  ) r ON true
