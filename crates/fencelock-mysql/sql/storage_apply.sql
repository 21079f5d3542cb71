-- CALL {prefix}storage_apply_v1(resource, token, owner, strict, is_write, value)
--
-- One fenced operation of MySqlStorage, in one transaction: admits (token, owner) by the rule
-- of DESIGN section 2 (a newer token, or the same token and owner unless strict = 1), records
-- it as the resource's fence and, for a write, stores value. A refused operation changes
-- nothing. The resource's row is locked (FOR UPDATE) from the check to the commit, so
-- concurrent operations on one resource are applied one at a time; two first operations on a
-- new resource that collide (duplicate key, or a deadlock on the gap both locked) are retried.
-- Returns one row: admitted (0 or 1), value (a read's value, else NULL), fence_token and
-- fence_owner (the resource's fence afterwards: the presented one if admitted, else the one
-- that refused it).
--
-- Runs as its definer, the installation's owner (DESIGN 8.3): the caller need not write the
-- storage, and moves its fence only by the rule.
CREATE PROCEDURE {prefix}storage_apply_v1(
    IN p_resource VARBINARY(512),
    IN p_token BIGINT,
    IN p_owner BINARY(16),
    IN p_strict TINYINT,
    IN p_write TINYINT,
    IN p_value LONGBLOB)
    MODIFIES SQL DATA
    SQL SECURITY DEFINER
BEGIN
    DECLARE v_token BIGINT;
    DECLARE v_owner BINARY(16);
    DECLARE v_value LONGBLOB DEFAULT NULL;
    DECLARE v_found INT DEFAULT 1;
    DECLARE v_raced INT DEFAULT 0;
    DECLARE v_tries INT DEFAULT 0;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;
    DECLARE CONTINUE HANDLER FOR 1062, 1213 SET v_raced = 1;

    attempt: LOOP
        SET v_found = 1, v_raced = 0;
        START TRANSACTION;
        SELECT fence_token, fence_owner INTO v_token, v_owner
        FROM {prefix}storage WHERE resource = p_resource FOR UPDATE;
        IF v_raced = 0 AND v_found = 0 THEN
            INSERT INTO {prefix}storage (resource, value, fence_token, fence_owner)
            VALUES (p_resource, IF(p_write = 1, p_value, NULL), p_token, p_owner);
            IF v_raced = 0 THEN
                COMMIT;
                SELECT CAST(1 AS SIGNED) AS admitted, v_value AS value,
                       p_token AS fence_token, p_owner AS fence_owner;
                LEAVE attempt;
            END IF;
        END IF;
        IF v_raced = 1 THEN
            ROLLBACK;
            SET v_tries = v_tries + 1;
            IF v_tries < 8 THEN
                ITERATE attempt;
            END IF;
            SIGNAL SQLSTATE 'FL003'
                SET MESSAGE_TEXT = 'fencelock: storage operation kept colliding; try again';
        END IF;
        IF p_token > v_token OR (p_token = v_token AND p_owner = v_owner AND p_strict = 0) THEN
            IF p_write = 1 THEN
                UPDATE {prefix}storage
                SET value = p_value, fence_token = p_token, fence_owner = p_owner
                WHERE resource = p_resource;
            ELSE
                UPDATE {prefix}storage
                SET fence_token = p_token, fence_owner = p_owner
                WHERE resource = p_resource;
                SELECT value INTO v_value FROM {prefix}storage WHERE resource = p_resource;
            END IF;
            COMMIT;
            SELECT CAST(1 AS SIGNED) AS admitted, v_value AS value,
                   p_token AS fence_token, p_owner AS fence_owner;
        ELSE
            ROLLBACK;
            SELECT CAST(0 AS SIGNED) AS admitted, v_value AS value,
                   v_token AS fence_token, v_owner AS fence_owner;
        END IF;
        LEAVE attempt;
    END LOOP;
END
