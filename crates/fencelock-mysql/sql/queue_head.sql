-- CALL {prefix}queue_head_v1(key, waiter, place_us, @head)
--
-- The queue of one key (queue_table.sql), as every queued operation sees it: forgets the
-- places that lapsed on the server's clock, then, with waiter not NULL and place_us > 0,
-- keeps that waiter's place for place_us more microseconds (added at the back if it had none:
-- a waiter whose place lapsed queues again behind everyone), and returns the first live
-- waiter (NULL when nobody waits). With waiter NULL it only forgets and reads.
-- A full table (max_heap_table_size) is purged of every lapsed place first; still full, the
-- place is not kept (SQLSTATE FL008): the waiter is refused, never granted out of turn.
CREATE PROCEDURE {prefix}queue_head_v1(
    IN p_key VARBINARY(512),
    IN p_waiter BINARY(16),
    IN p_place_us BIGINT,
    OUT p_head BINARY(16))
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
BEGIN
    DECLARE v_full INT DEFAULT 0;

    DELETE FROM {prefix}queue
    WHERE lock_key = p_key AND lapses_at <= UTC_TIMESTAMP(6);
    IF p_waiter IS NOT NULL AND p_place_us > 0 THEN
        BEGIN
            -- ER_RECORD_FILE_FULL: the MEMORY table reached max_heap_table_size.
            DECLARE CONTINUE HANDLER FOR 1114 SET v_full = 1;
            INSERT INTO {prefix}queue (lock_key, waiter, lapses_at)
            VALUES (p_key, p_waiter, UTC_TIMESTAMP(6) + INTERVAL p_place_us MICROSECOND)
            ON DUPLICATE KEY UPDATE lapses_at = VALUES(lapses_at);
            IF v_full = 1 THEN
                SET v_full = 0;
                DELETE FROM {prefix}queue WHERE lapses_at <= UTC_TIMESTAMP(6);
                INSERT INTO {prefix}queue (lock_key, waiter, lapses_at)
                VALUES (p_key, p_waiter, UTC_TIMESTAMP(6) + INTERVAL p_place_us MICROSECOND)
                ON DUPLICATE KEY UPDATE lapses_at = VALUES(lapses_at);
            END IF;
        END;
        IF v_full = 1 THEN
            SIGNAL SQLSTATE 'FL008'
                SET MESSAGE_TEXT = 'fencelock: the queue table is full; raise max_heap_table_size';
        END IF;
    END IF;
    SET p_head = (
        SELECT waiter FROM {prefix}queue
        WHERE lock_key = p_key AND lapses_at > UTC_TIMESTAMP(6)
        ORDER BY arrival
        LIMIT 1
    );
END
