-- MySqlFence: per resource, the last fence admitted inside a user's own transaction.
-- `fence_token` = 0 marks a record the running transaction has just created; a committed
-- record always holds an admitted fence.
CREATE TABLE IF NOT EXISTS {prefix}fences (
    resource VARBINARY(512) NOT NULL,
    fence_token BIGINT NOT NULL,
    fence_owner BINARY(16) NOT NULL,
    PRIMARY KEY (resource)
) ENGINE = InnoDB
