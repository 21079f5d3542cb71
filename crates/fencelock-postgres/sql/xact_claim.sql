-- Inside the caller's transaction, after its advisory lock. $1 key, $2 owner, $3 token.
-- Unless the schema is bound to advisory locks (whose holders the advisory lock already
-- excludes), claims the key's lease row for the transaction when no live lease holds it.
-- `claimed`: NULL when no claim is needed, true when claimed, false when a live lease holds
-- the key (the caller waits for it and asks again). Only a row whose lease has run out is
-- taken over (UPDATE ... WHERE expired) and a missing row is inserted with DO NOTHING:
-- neither locks a live holder's row, so a waiting transaction never blocks that holder's
-- renewals and release. The claim ends at commit (trigger fencelock_transaction_claim_ends).
WITH mechanism AS (
    SELECT (SELECT m.mechanism FROM {schema}.fencelock_mechanism m) AS bound
), taken_over AS (
    UPDATE {schema}.fencelock_leases l
       SET owner = $2, token = $3, expires_at = 'infinity'::timestamptz
      FROM mechanism
     WHERE l.key = $1 AND l.expires_at <= clock_timestamp()
       AND mechanism.bound IS DISTINCT FROM 'advisory'
    RETURNING 1
), inserted AS (
    INSERT INTO {schema}.fencelock_leases (key, owner, token, expires_at)
    SELECT $1, $2, $3, 'infinity'::timestamptz
      FROM mechanism
     WHERE mechanism.bound IS DISTINCT FROM 'advisory'
       AND NOT EXISTS (SELECT 1 FROM taken_over)
    ON CONFLICT (key) DO NOTHING
    RETURNING 1
)
SELECT bound,
       CASE WHEN bound = 'advisory' THEN NULL
            ELSE EXISTS (SELECT 1 FROM taken_over) OR EXISTS (SELECT 1 FROM inserted)
       END AS claimed
  FROM mechanism
