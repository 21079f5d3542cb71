-- One row per lock key: the key's token counter and, while a fencelock session holds the key's
-- GET_LOCK, that session and its lease.
--
-- `token` is the last token handed out for the key. Rows are created by the key's first grant
-- (or `advance_token`) and never deleted, and `token` only grows, so tokens survive restarts:
-- InnoDB commits the counter before the grant is returned.
--
-- `holder_*` describe the current lease: its fence, the connection (CONNECTION_ID()) that holds
-- the GET_LOCK, and `expires_at` on the server's clock (UTC_TIMESTAMP, so every session agrees
-- whatever its time zone). A release clears them.
CREATE TABLE IF NOT EXISTS {prefix}locks (
    lock_key VARBINARY(512) NOT NULL,
    token BIGINT NOT NULL,
    holder_token BIGINT NULL,
    holder_owner BINARY(16) NULL,
    holder_conn BIGINT UNSIGNED NULL,
    expires_at DATETIME(6) NULL,
    PRIMARY KEY (lock_key)
) ENGINE = InnoDB
