-- The current lease of each key held by a fencelock session: its fence, the connection
-- (CONNECTION_ID()) that holds the key's GET_LOCK, and when the lease runs out on the server's
-- clock (UTC_TIMESTAMP, so every session agrees whatever its time zone).
--
-- MEMORY, not InnoDB: a lease lives no longer than its session, and no session survives a
-- restart, so nothing here needs to be durable, and extend and release cost no log flush.
-- Every statement on a MEMORY table is atomic (it locks the table), which is what the
-- procedures rely on: each change is one conditional UPDATE or DELETE whose row count says
-- whether it won. `holder_conn` = 0 marks a lease a contender has claimed to end its session.
-- Rows are deleted by release; a row left by a session that vanished is replaced by the key's
-- next grant (or purged when the table fills up).
CREATE TABLE IF NOT EXISTS {prefix}leases (
    lock_key VARBINARY(512) NOT NULL,
    holder_token BIGINT NOT NULL,
    holder_owner BINARY(16) NOT NULL,
    holder_conn BIGINT UNSIGNED NOT NULL,
    expires_at DATETIME(6) NOT NULL,
    PRIMARY KEY (lock_key)
) ENGINE = MEMORY
