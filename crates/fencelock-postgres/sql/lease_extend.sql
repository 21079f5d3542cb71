-- $1 key, $2 owner, $3 token, $4 ttl in microseconds.
-- Extends only a live lease of this owner and token; never re-creates one.
WITH extended AS (
    UPDATE {schema}.fencelock_leases
       SET expires_at = clock_timestamp() + $4::float8 * interval '1 microsecond'
     WHERE key = $1 AND owner = $2 AND token = $3 AND expires_at > clock_timestamp()
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM extended) AS extended,
       EXISTS (
           SELECT 1 FROM {schema}.fencelock_leases
            WHERE key = $1 AND expires_at > clock_timestamp()
              AND NOT (owner = $2 AND token = $3)
       ) AS superseded
