-- $1 key, $2 waiter, $3 the place ttl in microseconds.
-- Gives up the waiter's place (fencelock_advisory_leave, migration 16), waking the next
-- place when the lock may have been kept for this one.
SELECT {schema}.fencelock_advisory_leave($1, $2, $3)
