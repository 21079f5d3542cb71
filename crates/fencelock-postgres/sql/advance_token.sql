-- $1 key, $2 floor. Raises the counter to at least the floor; never lowers it.
INSERT INTO {schema}.fencelock_counters AS c (key, last_token)
VALUES ($1, $2)
ON CONFLICT (key) DO UPDATE SET last_token = GREATEST(c.last_token, EXCLUDED.last_token)
RETURNING last_token
