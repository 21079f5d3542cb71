-- CALL {prefix}take_lock_v1(key, name, kill_wait_s, busy_wait_s, @got)
--
-- GET_LOCK(name) for this session, as a writer's acquire and a reader's grant both take it:
-- at once if it is free, or if it is held by a fencelock session whose lease ran out on the
-- server's clock. Such a session is first *claimed*, by one conditional UPDATE that succeeds
-- only while the lease is still that session's, still holds the lock and has run out (so its
-- own extend or release cannot also succeed), then ended with KILL; this session waits up to
-- kill_wait_s seconds for the lock to be let go. With busy_wait_s not NULL, a holder without
-- any lease (a grant under way, or a plain SQL client) is waited for up to busy_wait_s
-- seconds; with NULL it is not waited for.
-- got: GET_LOCK's answer, 1 when this session holds the lock.
CREATE PROCEDURE {prefix}take_lock_v1(
    IN p_key VARBINARY(512),
    IN p_name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN p_kill_wait_s DOUBLE,
    IN p_busy_wait_s DOUBLE,
    OUT p_got INT)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
BEGIN
    DECLARE v_leased INT DEFAULT 0;
    DECLARE v_victim BIGINT UNSIGNED DEFAULT NULL;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_victim = NULL;
    -- KILL of a session that ended in the meantime: there is nothing left to end.
    DECLARE CONTINUE HANDLER FOR 1094 BEGIN END;

    SET p_got = GET_LOCK(p_name, 0);
    IF p_got = 0 THEN
        IF p_busy_wait_s IS NOT NULL THEN
            SELECT COUNT(*) INTO v_leased FROM {prefix}leases
            WHERE lock_key = p_key AND holder_conn = IS_USED_LOCK(p_name);
        END IF;
        SELECT holder_conn INTO v_victim FROM {prefix}leases
        WHERE lock_key = p_key
          AND holder_conn = IS_USED_LOCK(p_name)
          AND expires_at <= UTC_TIMESTAMP(6);
        IF v_victim IS NOT NULL THEN
            UPDATE {prefix}leases SET holder_conn = 0
            WHERE lock_key = p_key
              AND holder_conn = v_victim
              AND holder_conn = IS_USED_LOCK(p_name)
              AND expires_at <= UTC_TIMESTAMP(6);
            IF ROW_COUNT() = 1 THEN
                KILL CONNECTION v_victim;
                SET p_got = GET_LOCK(p_name, p_kill_wait_s);
            END IF;
        ELSEIF p_busy_wait_s IS NOT NULL AND v_leased = 0 THEN
            SET p_got = GET_LOCK(p_name, p_busy_wait_s);
        END IF;
    END IF;
END
