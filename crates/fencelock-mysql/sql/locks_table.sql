-- The token counters of versions before the durable epoch (one InnoDB row per key, committed
-- by every grant). No longer written: install_epoch.sql starts the epoch above the largest
-- token found here, so every token of this version is above every token they handed out.
CREATE TABLE IF NOT EXISTS {prefix}locks (
    lock_key VARBINARY(512) NOT NULL,
    token BIGINT NOT NULL,
    PRIMARY KEY (lock_key)
) ENGINE = InnoDB
