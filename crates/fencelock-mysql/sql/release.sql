-- CALL {prefix}release_v1(key, name, owner, token)
--
-- On the holding session: clears the lease if it is this session's, lets go of GET_LOCK(name)
-- and restores the server's default wait_timeout. The row is locked while it is cleared, so a
-- contender deciding to KILL an expired holder either sees the lease cleared or ends this
-- session before the release completes.
-- Returns one row: released (1 if the lease was still valid on the server's clock),
-- unlocked (1 if this session held GET_LOCK(name) and let go of it).
CREATE PROCEDURE {prefix}release_v1(
    IN p_key VARBINARY(512),
    IN p_name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN p_owner BINARY(16),
    IN p_token BIGINT)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
BEGIN
    DECLARE v_valid INT DEFAULT 0;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_valid = 0;

    START TRANSACTION;
    SELECT COALESCE(expires_at > UTC_TIMESTAMP(6), 0) INTO v_valid FROM {prefix}locks
    WHERE lock_key = p_key
      AND holder_owner = p_owner
      AND holder_token = p_token
      AND holder_conn = CONNECTION_ID()
    FOR UPDATE;
    UPDATE {prefix}locks
    SET holder_token = NULL, holder_owner = NULL, holder_conn = NULL, expires_at = NULL
    WHERE lock_key = p_key
      AND holder_owner = p_owner
      AND holder_token = p_token
      AND holder_conn = CONNECTION_ID();
    COMMIT;
    SET SESSION wait_timeout = @@GLOBAL.wait_timeout;
    SELECT CAST(v_valid AS SIGNED) AS released,
           CAST(COALESCE(RELEASE_LOCK(p_name), 0) AS SIGNED) AS unlocked;
END
