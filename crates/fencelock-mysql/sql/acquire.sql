-- CALL {prefix}acquire_v6(key, name, owner, ttl_us, idle_s, kill_wait_s, waiter, place_us,
--                         busy_wait_s)
--
-- First the key's queue of waiters (queue_head_v1, DESIGN section 5.4, *Fair hand-off*): a
-- queued try (waiter not NULL) keeps its waiter's place for place_us more microseconds; then,
-- while a live waiter other than this try's is first in line, the try is refused without
-- looking at the lock (so a plain try, waiter NULL, sees a free lock as held while anyone is
-- queued). Only the first live waiter, or anyone when nobody waits, goes on to the grant
-- (acquire_v5's steps, which follow).
-- Takes GET_LOCK(name) for this session if it is free, or if it is held by a fencelock session
-- whose lease ran out on the server's clock, which it claims and ends with KILL first
-- (take_lock_v1, the same step as a reader's grant, called only when the lock is not free). A
-- holder without a lease is not waited for by a plain try, and for up to busy_wait_s seconds
-- by a queued one: the watcher sessions of waiters (wait_v5) hold the lock for an instant
-- when it is let go.
-- Holding the lock, it is still refused (and let go at once) while a reader of the key's read
-- phase is live on the server's clock: readers take GET_LOCK only for their grant, so no
-- reader can join or start a phase between this check and the end of this lease.
-- On a grant: takes the key's next token (next_token_v2: a MEMORY row, no log flush; a durable
-- commit only when the volatile state was lost), records the lease until now + ttl_us, arms
-- wait_timeout = idle_s (whole seconds >= the ttl), so that the server itself ends the session
-- of a holder that goes silent, and takes the waiter's place out of the queue.
-- Returns one row: granted (0 or 1), token (NULL unless granted), session (CONNECTION_ID()).
CREATE PROCEDURE {prefix}acquire_v6(
    IN p_key VARBINARY(512),
    IN p_name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN p_owner BINARY(16),
    IN p_ttl_us BIGINT,
    IN p_idle_s INT,
    IN p_kill_wait_s DOUBLE,
    IN p_waiter BINARY(16),
    IN p_place_us BIGINT,
    IN p_busy_wait_s DOUBLE)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
BEGIN
    DECLARE v_got INT DEFAULT 0;
    DECLARE v_token BIGINT;
    DECLARE v_full INT DEFAULT 0;
    DECLARE v_head BINARY(16) DEFAULT NULL;

    CALL {prefix}queue_head_v1(p_key, p_waiter, p_place_us, v_head);
    IF v_head IS NULL OR v_head <=> p_waiter THEN
        -- GET_LOCK of a name this session holds would succeed again (it counts): refused
        -- first.
        SET v_got = IF(IS_USED_LOCK(p_name) <=> CONNECTION_ID(), -1, GET_LOCK(p_name, 0));
        IF v_got = -1 THEN
            SIGNAL SQLSTATE 'FL002'
                SET MESSAGE_TEXT = 'fencelock: this session already holds the lock it asks for';
        END IF;
        IF NOT (v_got <=> 1) THEN
            -- The first waiter waits a little for a holder without a lease: a watcher
            -- (wait_v5) holds the lock for an instant after each release.
            CALL {prefix}take_lock_v1(p_key, p_name, p_kill_wait_s,
                                      IF(p_waiter IS NULL, NULL, p_busy_wait_s), v_got);
        END IF;
    END IF;

    IF v_got = 1 AND EXISTS (
        SELECT 1 FROM {prefix}readers
        WHERE lock_key = p_key AND expires_at > UTC_TIMESTAMP(6)
    ) THEN
        DO RELEASE_LOCK(p_name);
        SET v_got = 0;
    END IF;

    IF v_got = 1 THEN
        CALL {prefix}next_token_v2(p_key, v_token);
        BEGIN
            -- ER_RECORD_FILE_FULL: the MEMORY table reached max_heap_table_size.
            DECLARE CONTINUE HANDLER FOR 1114 SET v_full = 1;
            REPLACE INTO {prefix}leases
                (lock_key, holder_token, holder_owner, holder_conn, expires_at)
            VALUES (p_key, v_token, p_owner, CONNECTION_ID(),
                    UTC_TIMESTAMP(6) + INTERVAL p_ttl_us MICROSECOND);
            IF v_full = 1 THEN
                -- Leases of sessions that vanished an hour or more ago: the server has ended
                -- those sessions (wait_timeout), or their keys were granted again since.
                SET v_full = 0;
                DELETE FROM {prefix}leases WHERE expires_at < UTC_TIMESTAMP(6) - INTERVAL 1 HOUR;
                REPLACE INTO {prefix}leases
                    (lock_key, holder_token, holder_owner, holder_conn, expires_at)
                VALUES (p_key, v_token, p_owner, CONNECTION_ID(),
                        UTC_TIMESTAMP(6) + INTERVAL p_ttl_us MICROSECOND);
            END IF;
        END;
        IF v_full = 1 THEN
            DO RELEASE_LOCK(p_name);
            SIGNAL SQLSTATE 'FL004'
                SET MESSAGE_TEXT = 'fencelock: the leases table is full; raise max_heap_table_size';
        END IF;
        IF p_waiter IS NOT NULL THEN
            DELETE FROM {prefix}queue WHERE lock_key = p_key AND waiter = p_waiter;
        END IF;
        SET SESSION wait_timeout = p_idle_s;
        SELECT CAST(1 AS SIGNED) AS granted, v_token AS token,
               CAST(CONNECTION_ID() AS SIGNED) AS session;
    ELSE
        SELECT CAST(0 AS SIGNED) AS granted, CAST(NULL AS SIGNED) AS token,
               CAST(CONNECTION_ID() AS SIGNED) AS session;
    END IF;
END
