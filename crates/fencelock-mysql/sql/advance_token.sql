-- CALL {prefix}advance_token_v2(key, floor)
--
-- Raises the key's counter to at least floor (never lowers it), creating the row if needed,
-- so that the key's next grant is above floor. A floor in an epoch after the live one (or with
-- no live epoch) first makes its epoch durable and live (new_epoch_v1 with at_least), as
-- every token handed out must be below the durable epoch's successor. Floors are refused
-- (SQLSTATE FL006) past epoch 2^31 - 1 - 2^16: the last 2^16 epochs are kept for the epochs
-- the installation starts on its own (one per lost volatile state or used-up counter), which
-- a floor there would leave it without.
-- Returns one row: token, the counter afterwards.
CREATE PROCEDURE {prefix}advance_token_v2(IN p_key VARBINARY(512), IN p_floor BIGINT)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
BEGIN
    DECLARE v_marker VARBINARY(24) DEFAULT CONCAT(X'00', @@server_id);
    DECLARE v_live BIGINT DEFAULT NULL;
    DECLARE v_epoch BIGINT DEFAULT NULL;
    DECLARE v_full INT DEFAULT 0;

    IF p_floor IS NULL OR p_floor < 1 OR p_floor >> 32 > 2147418111 THEN
        SIGNAL SQLSTATE 'FL006'
            SET MESSAGE_TEXT = 'fencelock: token floor beyond epoch 2147418111, the last a floor may reach (the last 65536 epochs are kept for new epochs after a restart)';
    END IF;
    SELECT MAX(token) INTO v_live FROM {prefix}counters WHERE lock_key = v_marker;
    IF v_live IS NULL OR v_live < p_floor >> 32 THEN
        CALL {prefix}new_epoch_v1(v_live, p_floor >> 32, v_epoch);
    END IF;
    BEGIN
        -- ER_RECORD_FILE_FULL: emptied as next_token_v2 does; the floor's epoch is durable.
        DECLARE CONTINUE HANDLER FOR 1114 SET v_full = 1;
        INSERT INTO {prefix}counters (lock_key, token) VALUES (p_key, p_floor)
        ON DUPLICATE KEY UPDATE token = GREATEST(token, VALUES(token));
        IF v_full = 1 THEN
            DELETE FROM {prefix}counters;
            INSERT INTO {prefix}counters (lock_key, token) VALUES (p_key, p_floor);
        END IF;
    END;
    SELECT token FROM {prefix}counters WHERE lock_key = p_key;
END
