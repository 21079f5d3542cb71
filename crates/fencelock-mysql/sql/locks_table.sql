-- One row per lock key: the last token handed out for it. Rows are created by the key's first
-- grant (or `advance_token`) and never deleted, and `token` only grows, so tokens survive
-- restarts and crashes: InnoDB commits the counter before the grant is returned. This is the
-- only durable write of the lock backend, one per grant.
CREATE TABLE IF NOT EXISTS {prefix}locks (
    lock_key VARBINARY(512) NOT NULL,
    token BIGINT NOT NULL,
    PRIMARY KEY (lock_key)
) ENGINE = InnoDB
