-- CALL {prefix}acquire_v1(key, name, owner, ttl_us, idle_s, kill_wait_s)
--
-- Takes GET_LOCK(name) for this session if it is free, or if it is held by a fencelock session
-- whose lease ran out on the server's clock: that session is ended with KILL first (under the
-- key's row lock, so it cannot release and start another lease in between), and this session
-- waits up to kill_wait_s seconds for the lock to be let go.
-- On a grant: bumps the key's counter, records this session as holder until now + ttl_us, and
-- arms wait_timeout = idle_s (whole seconds >= the ttl), so that the server itself ends the
-- session of a holder that goes silent.
-- Returns one row: granted (0 or 1), token (NULL unless granted), session (CONNECTION_ID()).
CREATE PROCEDURE {prefix}acquire_v1(
    IN p_key VARBINARY(512),
    IN p_name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN p_owner BINARY(16),
    IN p_ttl_us BIGINT,
    IN p_idle_s INT,
    IN p_kill_wait_s DOUBLE)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
BEGIN
    DECLARE v_got INT DEFAULT 0;
    DECLARE v_victim BIGINT UNSIGNED DEFAULT NULL;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_victim = NULL;
    -- KILL of a session that ended in the meantime: there is nothing left to end.
    DECLARE CONTINUE HANDLER FOR 1094 BEGIN END;

    IF IS_USED_LOCK(p_name) <=> CONNECTION_ID() THEN
        SIGNAL SQLSTATE 'FL002'
            SET MESSAGE_TEXT = 'fencelock: this session already holds the lock it asks for';
    END IF;
    SET v_got = GET_LOCK(p_name, 0);
    IF v_got = 0 AND EXISTS (
        SELECT 1 FROM {prefix}locks
        WHERE lock_key = p_key
          AND holder_conn = IS_USED_LOCK(p_name)
          AND expires_at <= UTC_TIMESTAMP(6)
    ) THEN
        START TRANSACTION;
        SELECT holder_conn INTO v_victim FROM {prefix}locks
        WHERE lock_key = p_key
          AND holder_conn = IS_USED_LOCK(p_name)
          AND expires_at <= UTC_TIMESTAMP(6)
        FOR UPDATE;
        IF v_victim IS NOT NULL THEN
            KILL CONNECTION v_victim;
        END IF;
        COMMIT;
        IF v_victim IS NOT NULL THEN
            SET v_got = GET_LOCK(p_name, p_kill_wait_s);
        END IF;
    END IF;

    IF v_got = 1 THEN
        -- holder_token first: it reads the old counter under either evaluation order.
        INSERT INTO {prefix}locks
            (lock_key, token, holder_token, holder_owner, holder_conn, expires_at)
        VALUES
            (p_key, 1, 1, p_owner, CONNECTION_ID(),
             UTC_TIMESTAMP(6) + INTERVAL p_ttl_us MICROSECOND)
        ON DUPLICATE KEY UPDATE
            holder_token = token + 1,
            token = token + 1,
            holder_owner = p_owner,
            holder_conn = CONNECTION_ID(),
            expires_at = UTC_TIMESTAMP(6) + INTERVAL p_ttl_us MICROSECOND;
        SET SESSION wait_timeout = p_idle_s;
        SELECT CAST(1 AS SIGNED) AS granted, holder_token AS token,
               CAST(CONNECTION_ID() AS SIGNED) AS session
        FROM {prefix}locks WHERE lock_key = p_key;
    ELSE
        SELECT CAST(0 AS SIGNED) AS granted, CAST(NULL AS SIGNED) AS token,
               CAST(CONNECTION_ID() AS SIGNED) AS session;
    END IF;
END
