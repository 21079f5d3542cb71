-- $1 key. The transaction API's token: runs on its own connection, outside the caller's
-- transaction and after that transaction holds the key's advisory lock, and commits at once,
-- so a rolled-back transaction never gives its token back. Writes only the UNLOGGED counter:
-- the commit waits for no WAL flush.
-- Same next-token rule and signals as lease_acquire.sql: `live` NULL or `exhausted` mean the
-- caller must start a new epoch (fencelock_new_epoch) and try again.
WITH live AS (
    SELECT e.epoch FROM {schema}.fencelock_epoch_live e WHERE e.one
), counter AS (
    INSERT INTO {schema}.fencelock_counters AS c (key, last_token)
    SELECT $1, live.epoch * 4294967296 + 1 FROM live
    ON CONFLICT (key) DO UPDATE
        SET last_token = CASE WHEN c.last_token >> 32 >= EXCLUDED.last_token >> 32
                              THEN c.last_token + 1
                              ELSE EXCLUDED.last_token END
        WHERE c.last_token >> 32 < EXCLUDED.last_token >> 32
           OR (c.last_token & 4294967295) < 4294967295
    RETURNING last_token
)
SELECT g.token,
       (SELECT epoch FROM live) AS live,
       CASE WHEN g.token IS NULL THEN EXISTS (
           SELECT 1 FROM {schema}.fencelock_counters c, live
            WHERE c.key = $1
              AND c.last_token >> 32 >= live.epoch
              AND (c.last_token & 4294967295) = 4294967295
       ) ELSE false END AS exhausted
  FROM (SELECT (SELECT last_token FROM counter) AS token) g
