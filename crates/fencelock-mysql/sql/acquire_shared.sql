-- CALL {prefix}acquire_shared_v3(key, name, reader, phase_owner, ttl_us, kill_wait_s, busy_wait_s)
--
-- Joins the live read phase of the key as `reader`, or starts one, unless a fencelock writer
-- holds a valid lease. Serialised with writers by GET_LOCK(name), held only for this call:
-- a writer holds GET_LOCK for the whole life of its lease, and checks the readers table
-- while holding it, so a writer's grant and a reader's grant never interleave.
--
-- The lock is taken by take_lock_v1, the same step as a writer's acquire. GET_LOCK(name, 0)
-- is refused when:
-- - a fencelock writer holds the lock with a valid lease: not granted;
-- - its lease ran out on the server's clock: claimed and ended with KILL, exactly as
--   acquire does, and this session waits up to kill_wait_s seconds for the lock to be let go;
-- - the holder has no lease (another reader's grant or a writer's acquire under way, each a
--   matter of a moment, or a plain SQL client): this session waits up to busy_wait_s seconds
--   for the lock.
-- Holding the lock, one statement copies a live reader's phase fence into this reader's row
-- (a MEMORY statement is atomic, so the phase joined is live when it is joined); with no live
-- reader, the key's rows of earlier phases are deleted, the key's next token is taken
-- (next_token_v2, as exclusive grants take theirs) and the new phase's first row is written with
-- phase_owner. The reader's row runs out at now + ttl_us on the server's clock. GET_LOCK is
-- let go before returning, on every path (errors included).
-- Returns one row: granted (0 or 1), token and owner (the phase fence; NULL unless granted).
CREATE PROCEDURE {prefix}acquire_shared_v3(
    IN p_key VARBINARY(512),
    IN p_name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN p_reader BINARY(16),
    IN p_owner BINARY(16),
    IN p_ttl_us BIGINT,
    IN p_kill_wait_s DOUBLE,
    IN p_busy_wait_s DOUBLE)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
BEGIN
    DECLARE v_got INT DEFAULT 0;
    DECLARE v_token BIGINT DEFAULT NULL;
    DECLARE v_owner BINARY(16) DEFAULT NULL;
    DECLARE v_joined INT DEFAULT 0;
    DECLARE v_full INT DEFAULT 0;
    DECLARE v_purged INT DEFAULT 0;

    IF IS_USED_LOCK(p_name) <=> CONNECTION_ID() THEN
        SIGNAL SQLSTATE 'FL002'
            SET MESSAGE_TEXT = 'fencelock: this session already holds the lock it asks for';
    END IF;

    grant_reader: BEGIN
        DECLARE EXIT HANDLER FOR SQLEXCEPTION
        BEGIN
            DO RELEASE_LOCK(p_name);
            RESIGNAL;
        END;

        CALL {prefix}take_lock_v1(p_key, p_name, p_kill_wait_s, p_busy_wait_s, v_got);
        IF NOT (v_got <=> 1) THEN
            LEAVE grant_reader;
        END IF;

        -- Holding GET_LOCK, so no writer is granted and no other reader joins until the end.
        write_row: LOOP
            BEGIN
                -- ER_RECORD_FILE_FULL: the MEMORY table reached max_heap_table_size.
                DECLARE CONTINUE HANDLER FOR 1114 SET v_full = 1;
                SET v_full = 0;
                REPLACE INTO {prefix}readers
                    (lock_key, reader, phase_token, phase_owner, expires_at)
                SELECT p_key, p_reader, phase_token, phase_owner,
                       UTC_TIMESTAMP(6) + INTERVAL p_ttl_us MICROSECOND
                FROM {prefix}readers
                WHERE lock_key = p_key AND expires_at > UTC_TIMESTAMP(6)
                LIMIT 1;
                SET v_joined = ROW_COUNT();
                IF v_full = 0 AND v_joined <= 0 THEN
                    -- No live reader: none can appear while this session holds GET_LOCK
                    -- (extend never revives a reader that ran out), so every row left is
                    -- of an earlier phase.
                    DELETE FROM {prefix}readers WHERE lock_key = p_key;
                    CALL {prefix}next_token_v2(p_key, v_token);
                    INSERT INTO {prefix}readers
                        (lock_key, reader, phase_token, phase_owner, expires_at)
                    VALUES (p_key, p_reader, v_token, p_owner,
                            UTC_TIMESTAMP(6) + INTERVAL p_ttl_us MICROSECOND);
                END IF;
            END;
            IF v_full = 0 THEN
                LEAVE write_row;
            END IF;
            IF v_purged = 1 THEN
                SIGNAL SQLSTATE 'FL004'
                    SET MESSAGE_TEXT = 'fencelock: the readers table is full; raise max_heap_table_size';
            END IF;
            -- Readers that ran out hold nothing: their rows can go.
            SET v_purged = 1;
            DELETE FROM {prefix}readers WHERE expires_at <= UTC_TIMESTAMP(6);
        END LOOP;

        SELECT phase_token, phase_owner INTO v_token, v_owner
        FROM {prefix}readers
        WHERE lock_key = p_key AND reader = p_reader;
        DO RELEASE_LOCK(p_name);
    END;

    IF v_got <=> 1 THEN
        SELECT CAST(1 AS SIGNED) AS granted, v_token AS token, v_owner AS owner;
    ELSE
        SELECT CAST(0 AS SIGNED) AS granted, CAST(NULL AS SIGNED) AS token,
               CAST(NULL AS BINARY(16)) AS owner;
    END IF;
END
