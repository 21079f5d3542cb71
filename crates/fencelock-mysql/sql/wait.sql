-- CALL {prefix}wait_v3(key, name, max_s)
--
-- Blocks until GET_LOCK(name) may be free, at most max_s seconds, and at most until the
-- current fencelock holder's lease runs out on the server's clock. The wait is GET_LOCK itself,
-- so the server wakes it the moment the lock is let go; if it is granted it is let go again at
-- once.
-- Returns one row: outcome, 1 if the lock is (or was just) free, 2 if its holder's lease has
-- run out (the caller's next try ends that session), 0 if it is still held after the wait.
CREATE PROCEDURE {prefix}wait_v3(
    IN p_key VARBINARY(512),
    IN p_name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN p_max_s DOUBLE)
    READS SQL DATA
    SQL SECURITY INVOKER
BEGIN
    DECLARE v_holder BIGINT UNSIGNED DEFAULT IS_USED_LOCK(p_name);
    DECLARE v_left_s DOUBLE DEFAULT NULL;
    DECLARE v_outcome INT DEFAULT 1;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_left_s = NULL;

    IF v_holder IS NOT NULL AND v_holder <> CONNECTION_ID() THEN
        SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) / 1000000
        INTO v_left_s
        FROM {prefix}leases
        WHERE lock_key = p_key AND holder_conn = v_holder;
        IF v_left_s IS NOT NULL AND v_left_s <= 0 THEN
            SET v_outcome = 2;
        ELSEIF GET_LOCK(p_name, LEAST(p_max_s, COALESCE(v_left_s + 0.005, p_max_s))) = 1 THEN
            DO RELEASE_LOCK(p_name);
        ELSE
            SET v_outcome = 0;
        END IF;
    END IF;
    SELECT CAST(v_outcome AS SIGNED) AS outcome;
END
