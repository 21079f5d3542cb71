-- Removes fencelock's rows for the keys of one finished benchmark run, in one statement:
-- leases, lease readers, queued places (both backends'), advisory holders, phases and
-- readers, stored values and token counters whose key
-- (resource) starts with $1, the run's key prefix. `{schema}` is replaced by fencelock's
-- schema, quoted.
-- No other run and no application uses a key under that prefix, so deleting its counters
-- cannot hand a token out twice to anyone: the statement says so to the counters' guard
-- (migration 20) with `fencelock.forget_counters`, for this transaction only.
WITH forgetting AS (
    SELECT set_config('fencelock.forget_counters', 'on', true) AS on
), leases AS (
    DELETE FROM {schema}.fencelock_leases WHERE starts_with(key, $1)
), readers AS (
    DELETE FROM {schema}.fencelock_lease_readers WHERE starts_with(key, $1)
), places AS (
    DELETE FROM {schema}.fencelock_lease_places WHERE starts_with(key, $1)
), advisory_places AS (
    DELETE FROM {schema}.fencelock_advisory_places WHERE starts_with(key, $1)
), holders AS (
    DELETE FROM {schema}.fencelock_advisory_holders WHERE starts_with(key, $1)
), phases AS (
    DELETE FROM {schema}.fencelock_advisory_phases WHERE starts_with(key, $1)
), advisory_readers AS (
    DELETE FROM {schema}.fencelock_advisory_readers WHERE starts_with(key, $1)
), stored AS (
    DELETE FROM {schema}.fencelock_storage WHERE starts_with(resource, $1)
)
DELETE FROM {schema}.fencelock_counters
 WHERE (SELECT forgetting.on FROM forgetting) = 'on' AND starts_with(key, $1)
