-- $1 lock id. Whether any session (fencelock or not) holds the advisory lock.
SELECT EXISTS (
    SELECT 1 FROM pg_locks
     WHERE locktype = 'advisory'
       AND granted
       AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
       AND classid = (($1::bigint >> 32) & 4294967295)::oid
       AND objid = ($1::bigint & 4294967295)::oid
       AND objsubid = 1
)
