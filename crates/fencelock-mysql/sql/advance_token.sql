-- CALL {prefix}advance_token_v1(key, floor)
--
-- Raises the key's counter to at least floor (never lowers it), creating the row if needed.
-- Returns one row: token, the counter afterwards.
CREATE PROCEDURE {prefix}advance_token_v1(IN p_key VARBINARY(512), IN p_floor BIGINT)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
BEGIN
    INSERT INTO {prefix}locks (lock_key, token) VALUES (p_key, p_floor)
    ON DUPLICATE KEY UPDATE token = GREATEST(token, p_floor);
    SELECT token FROM {prefix}locks WHERE lock_key = p_key;
END
