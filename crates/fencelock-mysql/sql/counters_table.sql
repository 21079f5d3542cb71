-- The volatile half of every token: one row per lock key holding the last token handed out
-- for it (epoch << 32 | counter), and the live-epoch marker, a row whose key is a NUL byte
-- followed by the server's @@server_id (no lock key contains a NUL, so no key is a marker),
-- holding the epoch these counters belong to.
--
-- MEMORY, not InnoDB: a grant's bump writes no redo log and waits for no flush. A restart (or
-- a TRUNCATE, or the purge of a full table) empties the counters and the marker together, so
-- no grant can use a counter without its epoch or an epoch without its counters; the first
-- grant that finds no marker starts a new durable epoch (new_epoch.sql), above every token
-- handed out before. Every statement on a MEMORY table is atomic (it locks the table), which
-- is what next_token.sql relies on: it reads the marker and bumps the key's row in one.
CREATE TABLE IF NOT EXISTS {prefix}counters (
    lock_key VARBINARY(512) NOT NULL,
    token BIGINT NOT NULL,
    PRIMARY KEY (lock_key)
) ENGINE = MEMORY
