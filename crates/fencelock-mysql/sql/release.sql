-- CALL {prefix}release_v3(key, name, owner, token)
--
-- On the holding session: deletes the lease if it is still this session's and valid, lets go
-- of GET_LOCK(name) and restores the server's default wait_timeout. The lease is deleted
-- before the lock is let go, and a contender claims a lease only while it is still there, so
-- once this succeeds no contender can end this session: it may go back to the pool.
-- Returns one row: released (1 if the lease was this session's and still valid on the
-- server's clock), unlocked (1 if this session held GET_LOCK(name) and let go of it), head
-- (the first live waiter queued for the key, read after the lock was let go: the one waiter
-- the caller wakes; NULL when nobody waits).
CREATE PROCEDURE {prefix}release_v3(
    IN p_key VARBINARY(512),
    IN p_name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN p_owner BINARY(16),
    IN p_token BIGINT)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
BEGIN
    DECLARE v_released INT DEFAULT 0;
    DECLARE v_unlocked INT DEFAULT 0;

    DELETE FROM {prefix}leases
    WHERE lock_key = p_key
      AND holder_owner = p_owner
      AND holder_token = p_token
      AND holder_conn = CONNECTION_ID()
      AND expires_at > UTC_TIMESTAMP(6);
    SET v_released = ROW_COUNT();
    IF v_released = 0 THEN
        -- Ran out but not claimed yet: the caller closes this session anyway.
        DELETE FROM {prefix}leases
        WHERE lock_key = p_key
          AND holder_owner = p_owner
          AND holder_token = p_token
          AND holder_conn = CONNECTION_ID();
    END IF;
    SET SESSION wait_timeout = @@GLOBAL.wait_timeout;
    SET v_unlocked = COALESCE(RELEASE_LOCK(p_name), 0);
    SELECT CAST(v_released AS SIGNED) AS released,
           CAST(v_unlocked AS SIGNED) AS unlocked,
           (SELECT waiter FROM {prefix}queue
            WHERE lock_key = p_key AND lapses_at > UTC_TIMESTAMP(6)
            ORDER BY arrival
            LIMIT 1) AS head;
END
