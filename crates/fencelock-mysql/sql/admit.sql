-- CALL {prefix}admit_v1(resource, token, owner, strict)
--
-- The fence check inside the caller's own transaction (MySqlFence::admit). Admits (token,
-- owner) for resource by the rule of DESIGN section 2 and records it, in the caller's
-- transaction: it commits or rolls back with the caller's own statements.
--
-- Isolation: the resource's fence record is locked exclusively until the caller's transaction
-- ends, so transactions that admit the same resource run one after another, and each reads the
-- fence the previous one committed (a locking read sees the latest committed row under every
-- isolation level). The record is created, or its existing row locked, by INSERT ... ON
-- DUPLICATE KEY UPDATE, which takes an exclusive lock on an existing row; a plain INSERT IGNORE
-- would take a shared one, and two transactions upgrading shared locks deadlock.
--
-- Refusal: ROLLBACK of the caller's whole transaction (as an error aborts a PostgreSQL
-- transaction), then SIGNAL SQLSTATE 'FL001' with the current fence in the message, so nothing
-- the transaction did can be committed by mistake.
--
-- Runs as its definer, the installation's owner (DESIGN 8.3): the caller need not write the
-- fences, and moves one only by the rule.
CREATE PROCEDURE {prefix}admit_v1(
    IN p_resource VARBINARY(512),
    IN p_token BIGINT,
    IN p_owner BINARY(16),
    IN p_strict TINYINT)
    MODIFIES SQL DATA
    SQL SECURITY DEFINER
BEGIN
    DECLARE v_token BIGINT;
    DECLARE v_owner BINARY(16);
    DECLARE v_message VARCHAR(128);

    INSERT INTO {prefix}fences (resource, fence_token, fence_owner)
    VALUES (p_resource, 0, x'00000000000000000000000000000000')
    ON DUPLICATE KEY UPDATE fence_token = fence_token;
    SELECT fence_token, fence_owner INTO v_token, v_owner
    FROM {prefix}fences WHERE resource = p_resource FOR UPDATE;
    IF v_token <> 0
       AND NOT (p_token > v_token OR (p_token = v_token AND p_owner = v_owner AND p_strict = 0))
    THEN
        SET v_message = CONCAT('fencelock: stale fence; current token ', v_token,
                               ' owner ', LOWER(HEX(v_owner)));
        ROLLBACK;
        SIGNAL SQLSTATE 'FL001' SET MESSAGE_TEXT = v_message;
    END IF;
    UPDATE {prefix}fences SET fence_token = p_token, fence_owner = p_owner
    WHERE resource = p_resource;
END
