-- MySqlStorage: per resource, the value and the last admitted fence (DESIGN section 2).
-- `value` is NULL while only fenced reads have touched the resource.
CREATE TABLE IF NOT EXISTS {prefix}storage (
    resource VARBINARY(512) NOT NULL,
    value LONGBLOB NULL,
    fence_token BIGINT NOT NULL,
    fence_owner BINARY(16) NOT NULL,
    PRIMARY KEY (resource)
) ENGINE = InnoDB
