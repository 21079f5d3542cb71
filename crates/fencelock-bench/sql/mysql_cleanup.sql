-- Removes fencelock's rows for the keys of one finished benchmark run from one of its tables.
-- `{table}` is a table of fencelock's prefix (locks, leases, readers, storage, fences) and `{column}`
-- its key column (lock_key or resource), both VARBINARY: LEFT counts bytes there, so
-- ? (the run's key prefix, in bytes) is compared byte for byte. The first ? is its length.
-- No other run and no application uses a key under that prefix, so deleting its token
-- counters cannot hand a token out twice to anyone.
DELETE FROM {table} WHERE LEFT({column}, ?) = ?
