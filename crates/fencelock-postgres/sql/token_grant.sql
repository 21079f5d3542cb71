-- $1 key. The transaction API's token: runs on its own connection, outside the caller's
-- transaction and after that transaction holds the key's advisory lock, and commits at once,
-- so a rolled-back transaction never gives its token back. Writes only the UNLOGGED counter,
-- through fencelock_issue_token, which runs as the schema's owner:
-- the commit waits for no WAL flush.
-- Same next-token rule (fencelock_issue_token, migration 18) and signals as lease_acquire.sql:
-- `live` NULL or `exhausted` mean the caller must start a new epoch (fencelock_new_epoch) and
-- try again.
WITH live AS (
    SELECT e.epoch FROM {schema}.fencelock_epoch_live e WHERE e.one
), counter AS (
    SELECT {schema}.fencelock_issue_token($1, false) AS last_token FROM live
)
SELECT g.token,
       (SELECT epoch FROM live) AS live,
       CASE WHEN g.token IS NULL THEN EXISTS (
           SELECT 1 FROM {schema}.fencelock_counters c, live
            WHERE c.key = $1 AND {schema}.fencelock_token_exhausted(c.last_token, live.epoch)
       ) ELSE false END AS exhausted
  FROM (SELECT (SELECT last_token FROM counter) AS token) g
