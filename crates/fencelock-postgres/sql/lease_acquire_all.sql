-- $1 keys (text[], sorted, distinct), $2 owner, $3 ttl in microseconds, $4 the longest all the
-- row-lock waits together may take, in ms. Every key or none, in one transaction: see
-- fencelock_lease_acquire_all (migration 13). One statement, so it also holds behind a
-- transaction-mode pooler.
SELECT s.tokens, s.live, s.exhausted, s.bound
  FROM {schema}.fencelock_lease_acquire_all($1, $2, $3, $4) s
