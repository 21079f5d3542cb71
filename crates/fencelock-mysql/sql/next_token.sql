-- CALL {prefix}next_token_v2(key, @token)
--
-- The next token of a key, for a writer's grant and a read phase's alike: the caller holds
-- the key's GET_LOCK, so grants of one key take turns. One statement (atomic: it locks the
-- MEMORY table) reads the live marker L and sets the key's row to
--   L << 32 | 1      when the row is missing or in an earlier epoch than L,
--   token + 1        when its counter is below 2^32 - 1,
-- and otherwise (the counter is used up) leaves it as it is and hands out nothing. The token
-- comes back through LAST_INSERT_ID(expr), which the statement sets on every path (0: none),
-- so no second read is needed. No marker (the volatile state was lost: a restart, a
-- TRUNCATE) also hands out nothing. Either way new_epoch_v1 starts an epoch (one durable
-- commit, once per loss) and the statement runs again, at most four times.
-- The marker read after a try that handed out nothing is the one that try failed with only
-- if the try itself ran with it: another session may have started the epoch this try found
-- missing in between. So a marker not seen before is tried first, and only a marker a try
-- failed with is passed to new_epoch_v1 as seen (which replaces it): a loss met by many
-- grants costs one epoch even when one of them is slow between its try and its read.
-- A full table (max_heap_table_size) is emptied, marker included: tokens then go on in a new
-- epoch, above every token of this one. Nothing writes a redo log here.
--
-- Runs as its definer, the installation's owner (DESIGN 8.3): the caller need not write the
-- counters, and can only raise them.
CREATE PROCEDURE {prefix}next_token_v2(IN p_key VARBINARY(512), OUT p_token BIGINT)
    MODIFIES SQL DATA
    SQL SECURITY DEFINER
BEGIN
    DECLARE v_marker VARBINARY(24) DEFAULT CONCAT(X'00', @@server_id);
    DECLARE v_live BIGINT DEFAULT NULL;
    DECLARE v_epoch BIGINT DEFAULT NULL;
    DECLARE v_full INT DEFAULT 0;
    DECLARE v_tries INT DEFAULT 0;
    -- The marker read after the last try that handed out nothing.
    DECLARE v_seen BIGINT DEFAULT NULL;

    bump: LOOP
        SET p_token = LAST_INSERT_ID(0);
        BEGIN
            -- ER_RECORD_FILE_FULL: the MEMORY table reached max_heap_table_size.
            DECLARE CONTINUE HANDLER FOR 1114 SET v_full = 1;
            INSERT INTO {prefix}counters (lock_key, token)
            SELECT p_key, LAST_INSERT_ID(m.first)
            FROM (SELECT (token << 32) | 1 AS first
                  FROM {prefix}counters WHERE lock_key = v_marker) AS m
            ON DUPLICATE KEY UPDATE token = CASE
                WHEN token >> 32 < VALUES(token) >> 32 THEN LAST_INSERT_ID(VALUES(token))
                WHEN (token & 0xFFFFFFFF) < 0xFFFFFFFF THEN LAST_INSERT_ID(token + 1)
                -- Used up: unchanged, and no token.
                ELSE token + LAST_INSERT_ID(0)
            END;
        END;
        IF v_full = 1 THEN
            SET v_full = 0;
            DELETE FROM {prefix}counters;
        ELSE
            SET p_token = LAST_INSERT_ID();
            IF p_token > 0 THEN
                LEAVE bump;
            END IF;
        END IF;
        IF v_tries = 4 THEN
            SIGNAL SQLSTATE 'FL007'
                SET MESSAGE_TEXT = 'fencelock: no token after starting new epochs: the live epoch keeps disappearing';
        END IF;
        SET v_tries = v_tries + 1;
        SELECT MAX(token) INTO v_live FROM {prefix}counters WHERE lock_key = v_marker;
        IF v_live IS NOT NULL AND NOT (v_live <=> v_seen) THEN
            -- A marker no try has failed with yet: try it before replacing it.
            SET v_seen = v_live;
        ELSE
            CALL {prefix}new_epoch_v1(v_live, NULL, v_epoch);
        END IF;
    END LOOP;
END
