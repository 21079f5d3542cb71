-- CALL {prefix}wait_v4(key, name, max_s, poll_s)
--
-- Blocks until the key may be free for a writer, at most max_s seconds.
-- - While GET_LOCK(name) is held: waits in GET_LOCK itself, at most until the current
--   fencelock holder's lease runs out on the server's clock, so the server wakes it the moment
--   the lock is let go; if it is granted it is let go again at once, and the call returns (a
--   writer's release may let readers in, and a reader's grant may have started a phase).
-- - While the lock is free but a reader of the key's read phase is live: readers hold no
--   session to wait on, so the readers table is looked at every poll_s seconds until no
--   reader is live (the last one released or ran out).
-- Returns one row: outcome, 1 if the lock is (or was just) free and no reader is live, 2 if
-- its holder's lease has run out (the caller's next try ends that session), 0 if it is still
-- held, or the read phase still live, after the wait.
CREATE PROCEDURE {prefix}wait_v4(
    IN p_key VARBINARY(512),
    IN p_name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN p_max_s DOUBLE,
    IN p_poll_s DOUBLE)
    READS SQL DATA
    SQL SECURITY INVOKER
BEGIN
    DECLARE v_holder BIGINT UNSIGNED DEFAULT IS_USED_LOCK(p_name);
    DECLARE v_left_s DOUBLE DEFAULT NULL;
    DECLARE v_outcome INT DEFAULT 1;
    DECLARE v_until DATETIME(6)
        DEFAULT UTC_TIMESTAMP(6) + INTERVAL CAST(p_max_s * 1000000 AS SIGNED) MICROSECOND;
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
    ELSE
        poll: WHILE EXISTS (
            SELECT 1 FROM {prefix}readers
            WHERE lock_key = p_key AND expires_at > UTC_TIMESTAMP(6)
        ) DO
            IF UTC_TIMESTAMP(6) >= v_until THEN
                SET v_outcome = 0;
                LEAVE poll;
            END IF;
            DO SLEEP(LEAST(p_poll_s,
                           TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), v_until) / 1000000));
        END WHILE;
    END IF;
    SELECT CAST(v_outcome AS SIGNED) AS outcome;
END
