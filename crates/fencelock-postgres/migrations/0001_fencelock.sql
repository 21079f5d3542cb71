-- fencelock schema, version 1. Everything lives in the schema named by the connection's
-- search_path, so several independent fencelock installations can share one database.

-- One fencing-token counter per lock key. Rows are never deleted: a token handed out once is
-- never handed out again for the same key, across releases, expiries and server restarts.
CREATE TABLE fencelock_counters (
    key        text   PRIMARY KEY,
    last_token bigint NOT NULL CHECK (last_token > 0)
);

-- PgLeaseBackend: one row per key, expiry by the server's clock. An expired row is simply
-- overwritten by the next grant.
CREATE TABLE fencelock_leases (
    key        text        PRIMARY KEY,
    owner      bytea       NOT NULL,
    token      bigint      NOT NULL,
    expires_at timestamptz NOT NULL
);

-- PgAdvisoryBackend: who holds the session advisory lock of a key, for inspect. A row only
-- counts while `pid` still holds the advisory lock `lock_id` (checked against pg_locks).
CREATE TABLE fencelock_advisory_holders (
    key        text        PRIMARY KEY,
    lock_id    bigint      NOT NULL,
    owner      bytea       NOT NULL,
    token      bigint      NOT NULL,
    pid        integer     NOT NULL,
    expires_at timestamptz NOT NULL
);

-- PgStorage: one row per resource with the last admitted fence. `value` is NULL when only a
-- fenced read has touched the resource.
CREATE TABLE fencelock_storage (
    resource text   PRIMARY KEY,
    value    bytea,
    token    bigint NOT NULL,
    owner    bytea  NOT NULL
);

-- A released lock wakes waiters: LISTEN "fencelock_<schema>", payload = the key.
CREATE FUNCTION fencelock_notify_release() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('fencelock_' || TG_TABLE_SCHEMA, OLD.key);
    RETURN OLD;
END
$$;

CREATE TRIGGER fencelock_lease_released
    AFTER DELETE ON fencelock_leases
    FOR EACH ROW EXECUTE FUNCTION fencelock_notify_release();

CREATE TRIGGER fencelock_advisory_released
    AFTER DELETE ON fencelock_advisory_holders
    FOR EACH ROW EXECUTE FUNCTION fencelock_notify_release();

-- The fence rule of DESIGN section 2, mirroring fencelock_core::FenceRule::admits:
-- admit `p_token` iff it is greater than the last admitted token, or (monotonic rule only) equal
-- to it with the same owner. A refused call changes nothing and returns the current fence.
-- `p_write` stores `p_value`; otherwise the call is a fenced read returning the stored value.
-- Each statement below takes a fresh snapshot (READ COMMITTED), and the row lock serialises
-- concurrent operations on one resource.
CREATE FUNCTION fencelock_storage_apply(
    p_resource text,
    p_token    bigint,
    p_owner    bytea,
    p_strict   boolean,
    p_write    boolean,
    p_value    bytea
) RETURNS TABLE (admitted boolean, cur_token bigint, cur_owner bytea, cur_value bytea)
LANGUAGE plpgsql AS $$
DECLARE
    last_token bigint;
    last_owner bytea;
    last_value bytea;
BEGIN
    LOOP
        SELECT s.token, s.owner, s.value
          INTO last_token, last_owner, last_value
          FROM fencelock_storage s
         WHERE s.resource = p_resource
           FOR UPDATE;
        IF NOT FOUND THEN
            INSERT INTO fencelock_storage AS s (resource, value, token, owner)
            VALUES (p_resource, CASE WHEN p_write THEN p_value END, p_token, p_owner)
            ON CONFLICT (resource) DO NOTHING;
            IF FOUND THEN
                RETURN QUERY SELECT true, p_token, p_owner, NULL::bytea;
                RETURN;
            END IF;
            -- A concurrent first operation created the row: decide against it.
            CONTINUE;
        END IF;
        IF p_token > last_token
           OR (NOT p_strict AND p_token = last_token AND p_owner = last_owner) THEN
            UPDATE fencelock_storage s
               SET token = p_token,
                   owner = p_owner,
                   value = CASE WHEN p_write THEN p_value ELSE s.value END
             WHERE s.resource = p_resource;
            RETURN QUERY SELECT true, p_token, p_owner,
                                CASE WHEN p_write THEN NULL::bytea ELSE last_value END;
        ELSE
            RETURN QUERY SELECT false, last_token, last_owner, NULL::bytea;
        END IF;
        RETURN;
    END LOOP;
END
$$;
