-- $1 the mechanism ('lease' or 'advisory') of a backend about to grant in this schema.
-- Records it as the schema's one mechanism unless one is recorded already, and returns the
-- schema's mechanism (no row only when another process recorded it concurrently, after this
-- statement's snapshot: ask again).
WITH bound AS (
    INSERT INTO {schema}.fencelock_mechanism (mechanism) VALUES ($1)
    ON CONFLICT (one) DO NOTHING
    RETURNING mechanism
)
SELECT mechanism FROM bound
UNION ALL
SELECT mechanism FROM {schema}.fencelock_mechanism
LIMIT 1
