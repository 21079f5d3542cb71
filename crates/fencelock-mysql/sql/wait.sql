-- CALL {prefix}wait_v5(key, name, max_s, poll_s, skip)
--
-- Blocks until the key may be free for a writer, at most max_s seconds (wait_v4, with the
-- queue's head).
-- - While GET_LOCK(name) is held by a lease that has not run out: waits in GET_LOCK itself,
--   at most until that lease runs out on the server's clock, so the server wakes it the
--   moment the lock is let go; if it is granted it is let go again at once, and the call
--   returns (a writer's release may let readers in, and a reader's grant may have started a
--   phase).
-- - While the lock is free but a reader of the key's read phase is live: readers hold no
--   session to wait on, so the readers table is looked at every poll_s seconds until no
--   reader is live (the last one released or ran out).
-- - While the lock is free (or its holder's lease has run out) and the first live waiter
--   queued for the key is skip (not NULL): it is that waiter's turn, and the caller has none
--   of its own to wake, so the call looks again every poll_s seconds until the lock is taken
--   (then waits in GET_LOCK as above) or the queue's head changes (skip took the lock and
--   let go, left, or its place lapsed).
-- Returns one row: outcome, 1 if the lock is (or was just) free and no reader is live, 2 if
-- its holder's lease has run out (the caller's next try ends that session), 0 if it is still
-- held, or the read phase still live, or still skip's turn, after the wait; and head, the
-- first live waiter queued for the key (NULL when nobody waits), whose turn it is when the
-- outcome is not 0: the one waiter the caller wakes.
CREATE PROCEDURE {prefix}wait_v5(
    IN p_key VARBINARY(512),
    IN p_name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN p_max_s DOUBLE,
    IN p_poll_s DOUBLE,
    IN p_skip BINARY(16))
    READS SQL DATA
    SQL SECURITY INVOKER
BEGIN
    DECLARE v_holder BIGINT UNSIGNED DEFAULT NULL;
    DECLARE v_left_s DOUBLE DEFAULT NULL;
    DECLARE v_outcome INT DEFAULT 0;
    DECLARE v_head BINARY(16) DEFAULT NULL;
    DECLARE v_until DATETIME(6)
        DEFAULT UTC_TIMESTAMP(6) + INTERVAL CAST(p_max_s * 1000000 AS SIGNED) MICROSECOND;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_left_s = NULL;

    watch: LOOP
        SET v_holder = IS_USED_LOCK(p_name);
        SET v_left_s = NULL;
        IF v_holder IS NOT NULL AND v_holder <> CONNECTION_ID() THEN
            SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) / 1000000
            INTO v_left_s
            FROM {prefix}leases
            WHERE lock_key = p_key AND holder_conn = v_holder;
            IF v_left_s IS NOT NULL AND v_left_s <= 0 THEN
                SET v_outcome = 2;
            ELSE
                IF GET_LOCK(p_name,
                            GREATEST(0, LEAST(
                                TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), v_until) / 1000000,
                                COALESCE(v_left_s + 0.005, p_max_s)))) = 1 THEN
                    DO RELEASE_LOCK(p_name);
                    SET v_outcome = 1;
                ELSE
                    SET v_outcome = 0;
                END IF;
                LEAVE watch;
            END IF;
        ELSEIF EXISTS (
            SELECT 1 FROM {prefix}readers
            WHERE lock_key = p_key AND expires_at > UTC_TIMESTAMP(6)
        ) THEN
            SET v_outcome = 0;
        ELSE
            SET v_outcome = 1;
        END IF;
        IF v_outcome <> 0 THEN
            SET v_head = (
                SELECT waiter FROM {prefix}queue
                WHERE lock_key = p_key AND lapses_at > UTC_TIMESTAMP(6)
                ORDER BY arrival
                LIMIT 1
            );
            IF p_skip IS NULL OR NOT (v_head <=> p_skip) THEN
                LEAVE watch;
            END IF;
        END IF;
        IF UTC_TIMESTAMP(6) >= v_until THEN
            SET v_outcome = 0;
            LEAVE watch;
        END IF;
        DO SLEEP(LEAST(p_poll_s,
                       TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), v_until) / 1000000));
    END LOOP;
    SELECT CAST(v_outcome AS SIGNED) AS outcome,
           (SELECT waiter FROM {prefix}queue
            WHERE lock_key = p_key AND lapses_at > UTC_TIMESTAMP(6)
            ORDER BY arrival
            LIMIT 1) AS head;
END
