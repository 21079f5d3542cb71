-- CALL {prefix}extend_shared_v1(key, reader, token, owner, ttl_us)
--
-- Moves the reader's expiry to now + ttl_us on the server's clock, only if its row is still in
-- the phase of (token, owner) and has not run out: a reader that ran out, was released, or
-- whose phase ended is never revived (a writer may have been granted since). One conditional
-- UPDATE on the MEMORY table: atomic, no log flush. No GET_LOCK: a live reader already keeps
-- writers out, and a writer's check that found this row run out cannot be undone by it.
-- Returns one row: extended (0 or 1).
CREATE PROCEDURE {prefix}extend_shared_v1(
    IN p_key VARBINARY(512),
    IN p_reader BINARY(16),
    IN p_token BIGINT,
    IN p_owner BINARY(16),
    IN p_ttl_us BIGINT)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
BEGIN
    UPDATE {prefix}readers
    SET expires_at = UTC_TIMESTAMP(6) + INTERVAL p_ttl_us MICROSECOND
    WHERE lock_key = p_key
      AND reader = p_reader
      AND phase_token = p_token
      AND phase_owner = p_owner
      AND expires_at > UTC_TIMESTAMP(6);
    SELECT CAST(ROW_COUNT() = 1 AS SIGNED) AS extended;
END
