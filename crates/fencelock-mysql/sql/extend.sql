-- CALL {prefix}extend_v2(key, name, owner, token, ttl_us, idle_s)
--
-- On the holding session: moves the lease's expiry to now + ttl_us and re-arms wait_timeout,
-- only if the lease is still this session's (not claimed by a contender), the session still
-- holds the GET_LOCK, and the lease has not run out on the server's clock: a lease that ran out
-- is never revived. One conditional UPDATE on the MEMORY table: no log flush.
-- Returns one row: extended (0 or 1).
CREATE PROCEDURE {prefix}extend_v2(
    IN p_key VARBINARY(512),
    IN p_name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN p_owner BINARY(16),
    IN p_token BIGINT,
    IN p_ttl_us BIGINT,
    IN p_idle_s INT)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
BEGIN
    UPDATE {prefix}leases
    SET expires_at = UTC_TIMESTAMP(6) + INTERVAL p_ttl_us MICROSECOND
    WHERE lock_key = p_key
      AND holder_owner = p_owner
      AND holder_token = p_token
      AND holder_conn = CONNECTION_ID()
      AND expires_at > UTC_TIMESTAMP(6)
      AND IS_USED_LOCK(p_name) <=> CONNECTION_ID();
    IF ROW_COUNT() = 1 THEN
        SET SESSION wait_timeout = p_idle_s;
        SELECT CAST(1 AS SIGNED) AS extended;
    ELSE
        SELECT CAST(0 AS SIGNED) AS extended;
    END IF;
END
