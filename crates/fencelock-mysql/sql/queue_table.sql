-- The waiters queued for each key (DESIGN section 5.4, *Fair hand-off*): one row per waiting
-- request, `arrival` its place in line (a MEMORY table's AUTO_INCREMENT: it only grows while
-- the table lives), `lapses_at` when the place lapses on the server's clock unless its waiter
-- tries again (each queued try moves it a place ttl on, and never moves `arrival`).
--
-- MEMORY, like the leases: a place is worth nothing once its waiter stopped trying, and no
-- waiter outlives a restart by more than a place ttl, so nothing here needs to be durable and
-- a queued try flushes no log. Every statement on a MEMORY table is atomic (it locks the
-- table). Rows are deleted by their waiter's grant or leave, by the next try on the key once
-- they lapsed, or, when the table is full, by a purge of every lapsed place.
CREATE TABLE IF NOT EXISTS {prefix}queue (
    lock_key VARBINARY(512) NOT NULL,
    waiter BINARY(16) NOT NULL,
    arrival BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    lapses_at DATETIME(6) NOT NULL,
    PRIMARY KEY (lock_key, waiter),
    KEY by_arrival (lock_key, arrival) USING BTREE,
    KEY (arrival)
) ENGINE = MEMORY
