-- The durable half of every token: one row, the last epoch started. Written only by
-- new_epoch.sql, in a committed InnoDB transaction that is on disk before the epoch's marker
-- is written (with innodb_flush_log_at_trx_commit = 1), so every token handed out on this
-- server is below (epoch + 1) << 32. Created (by install_epoch.sql) above every token the
-- counters of earlier versions (the `locks` table) handed out.
CREATE TABLE IF NOT EXISTS {prefix}epoch (
    id TINYINT UNSIGNED NOT NULL,
    epoch BIGINT NOT NULL,
    PRIMARY KEY (id),
    CONSTRAINT {prefix}one_epoch CHECK (id = 1),
    CONSTRAINT {prefix}epoch_range CHECK (epoch BETWEEN 0 AND 2147483647)
) ENGINE = InnoDB
