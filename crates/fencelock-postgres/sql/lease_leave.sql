-- $1 key, $2 waiter, $3 the hand-off ttl in microseconds, $4 the place ttl in microseconds.
-- Gives up the waiter's place and a lock handed to it (fencelock_lease_leave, migration 14).
SELECT {schema}.fencelock_lease_leave($1, $2, $3, $4)
