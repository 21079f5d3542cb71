-- CALL {prefix}new_epoch_v1(seen, at_least, @epoch)
--
-- Starts a new durable token epoch, unless another caller already replaced the one the
-- caller saw: seen is the live marker the caller found (NULL: none, the volatile state was
-- lost), at_least (NULL: 0) an epoch the new one must reach (a token floor's). Runs under a
-- named lock of its own, so concurrent callers take turns, and each re-reads the marker: after
-- a loss the first caller starts the epoch, the others find its marker and use it (one loss
-- costs one epoch however many grants meet it).
-- The new epoch is above the durable one and above the epoch of every counter row left, and
-- it is committed (an InnoDB transaction on the epoch row, FOR UPDATE) before the marker that
-- lets grants use it is written: with innodb_flush_log_at_trx_commit = 1 the commit is on
-- disk first, so no token of the epoch can be handed out before its start survives a crash.
-- The last epoch a token can be in is 2^31 - 1 (tokens are positive BIGINTs); past it,
-- SQLSTATE FL007.
-- epoch: the live epoch afterwards.
CREATE PROCEDURE {prefix}new_epoch_v1(IN p_seen BIGINT, IN p_at_least BIGINT, OUT p_epoch BIGINT)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
BEGIN
    DECLARE v_marker VARBINARY(24) DEFAULT CONCAT(X'00', @@server_id);
    DECLARE v_name VARCHAR(64) DEFAULT 'fencelock#epoch:{prefix}';
    DECLARE v_live BIGINT DEFAULT NULL;
    DECLARE v_durable BIGINT DEFAULT NULL;
    DECLARE v_floor BIGINT DEFAULT COALESCE(p_at_least, 0);

    IF NOT (GET_LOCK(v_name, 10) <=> 1) THEN
        SIGNAL SQLSTATE 'FL007'
            SET MESSAGE_TEXT = 'fencelock: waited 10 s in vain for another session starting a token epoch';
    END IF;
    start_epoch: BEGIN
        DECLARE EXIT HANDLER FOR SQLEXCEPTION
        BEGIN
            ROLLBACK;
            DO RELEASE_LOCK(v_name);
            RESIGNAL;
        END;

        SELECT MAX(token) INTO v_live FROM {prefix}counters WHERE lock_key = v_marker;
        IF v_live IS NOT NULL AND NOT (v_live <=> p_seen) AND v_live >= v_floor THEN
            -- Another caller started an epoch since this one looked.
            SET p_epoch = v_live;
        ELSE
            START TRANSACTION;
            SELECT epoch INTO v_durable FROM {prefix}epoch WHERE id = 1 FOR UPDATE;
            IF v_durable IS NULL THEN
                SIGNAL SQLSTATE 'FL007'
                    SET MESSAGE_TEXT = 'fencelock: the epoch row is missing; connect with install on to create it';
            END IF;
            SET p_epoch = GREATEST(
                v_durable + 1,
                v_floor,
                (SELECT COALESCE(MAX(token) >> 32, 0) + 1 FROM {prefix}counters));
            IF p_epoch > 2147483647 THEN
                SIGNAL SQLSTATE 'FL007'
                    SET MESSAGE_TEXT = 'fencelock: every token epoch is used up (epoch 2147483647 was the last)';
            END IF;
            UPDATE {prefix}epoch SET epoch = p_epoch WHERE id = 1;
            COMMIT;
            -- Only now, with the epoch on disk, may grants use it.
            REPLACE INTO {prefix}counters (lock_key, token) VALUES (v_marker, p_epoch);
        END IF;
        DO RELEASE_LOCK(v_name);
    END;
END
