-- CALL {prefix}wait_v2(key, name, max_s)
--
-- Blocks until GET_LOCK(name) may be free, at most max_s seconds, and at most until the
-- current fencelock holder's lease runs out on the server's clock (then the caller's next try
-- ends that session). The wait is GET_LOCK itself, so the server wakes it the moment the lock
-- is let go; if it is granted it is let go again at once. Returns no rows.
CREATE PROCEDURE {prefix}wait_v2(
    IN p_key VARBINARY(512),
    IN p_name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN p_max_s DOUBLE)
    READS SQL DATA
    SQL SECURITY INVOKER
BEGIN
    DECLARE v_holder BIGINT UNSIGNED DEFAULT IS_USED_LOCK(p_name);
    DECLARE v_left_s DOUBLE DEFAULT NULL;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_left_s = NULL;

    IF v_holder IS NOT NULL AND v_holder <> CONNECTION_ID() THEN
        SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) / 1000000
        INTO v_left_s
        FROM {prefix}leases
        WHERE lock_key = p_key AND holder_conn = v_holder;
        IF v_left_s IS NULL OR v_left_s > 0 THEN
            IF GET_LOCK(p_name, LEAST(p_max_s, COALESCE(v_left_s + 0.005, p_max_s))) = 1 THEN
                DO RELEASE_LOCK(p_name);
            END IF;
        END IF;
    END IF;
END
