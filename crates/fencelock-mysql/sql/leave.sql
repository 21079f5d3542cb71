-- CALL {prefix}leave_v1(key, name, waiter)
--
-- Gives up a waiter's place in the key's queue (its request timed out, failed or was
-- cancelled). Nothing is ever held for a waiter (a grant is always the waiter's own try), so
-- there is nothing else to give up.
-- Returns one row: had (1 if the waiter had a place), head (the first live waiter now, NULL
-- when nobody waits), free (1 when GET_LOCK(name) is free: then it is head's turn, and the
-- caller wakes it).
CREATE PROCEDURE {prefix}leave_v1(
    IN p_key VARBINARY(512),
    IN p_name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN p_waiter BINARY(16))
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
BEGIN
    DECLARE v_had INT DEFAULT 0;
    DECLARE v_head BINARY(16) DEFAULT NULL;

    DELETE FROM {prefix}queue WHERE lock_key = p_key AND waiter = p_waiter;
    SET v_had = ROW_COUNT();
    CALL {prefix}queue_head_v1(p_key, NULL, 0, v_head);
    SELECT CAST(v_had AS SIGNED) AS had, v_head AS head,
           CAST(IS_FREE_LOCK(p_name) <=> 1 AS SIGNED) AS free;
END
