-- Removes fencelock's rows for the keys of one finished benchmark run from one of its tables.
-- `{table}` is a table of the installation (schema.rs lists them all) and `{column}` its key
-- column (lock_key or resource), VARBINARY: LEFT counts bytes there, so the second ? (the
-- run's key prefix, in bytes) is compared byte for byte. The first ? is its length.
-- No other run and no application uses a key under that prefix, so deleting its token
-- counters cannot hand a token out twice to anyone.
DELETE FROM {prefix}{table} WHERE LEFT({column}, ?) = ?
