-- CALL {prefix}release_shared_v1(key, reader, token, owner)
--
-- Deletes the reader's row in the phase of (token, owner). The phase ends with its last live
-- reader; the row of a reader that already ran out is deleted too, as it holds nothing.
-- Returns one row: released (1 if the reader was in that phase and live on the server's
-- clock).
CREATE PROCEDURE {prefix}release_shared_v1(
    IN p_key VARBINARY(512),
    IN p_reader BINARY(16),
    IN p_token BIGINT,
    IN p_owner BINARY(16))
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
BEGIN
    DECLARE v_released INT DEFAULT 0;

    DELETE FROM {prefix}readers
    WHERE lock_key = p_key
      AND reader = p_reader
      AND phase_token = p_token
      AND phase_owner = p_owner
      AND expires_at > UTC_TIMESTAMP(6);
    SET v_released = ROW_COUNT();
    IF v_released = 0 THEN
        DELETE FROM {prefix}readers
        WHERE lock_key = p_key
          AND reader = p_reader
          AND phase_token = p_token
          AND phase_owner = p_owner;
    END IF;
    SELECT CAST(v_released AS SIGNED) AS released;
END
