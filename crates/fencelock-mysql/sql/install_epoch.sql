-- CALL {prefix}install_epoch_v1()
--
-- Creates the epoch row if it is missing: epoch 0 on a new installation (tokens 1, 2, 3...),
-- or one above the epoch of the largest token the counters of earlier versions (`locks`)
-- handed out. Only the caller that created the row (committed first, autocommit) writes the
-- live marker of that epoch; a grant that finds no marker first starts a new epoch instead,
-- and INSERT IGNORE leaves its marker alone. Run by every install; a no-op once the row exists.
--
-- Runs as its definer, the installation's owner (DESIGN 8.3): an application account's
-- connect runs it, and need not write the epoch.
CREATE PROCEDURE {prefix}install_epoch_v1()
    MODIFIES SQL DATA
    SQL SECURITY DEFINER
BEGIN
    -- Every connect gets here: the old counters are read only while the row is missing.
    IF NOT EXISTS (SELECT 1 FROM {prefix}epoch WHERE id = 1) THEN
        INSERT IGNORE INTO {prefix}epoch (id, epoch)
        SELECT 1, COALESCE((MAX(token) >> 32) + 1, 0) FROM {prefix}locks;
        IF ROW_COUNT() = 1 THEN
            INSERT IGNORE INTO {prefix}counters (lock_key, token)
            SELECT CONCAT(X'00', @@server_id), epoch FROM {prefix}epoch WHERE id = 1;
        END IF;
    END IF;
END
