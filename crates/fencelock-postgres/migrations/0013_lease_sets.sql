-- fencelock schema, version 13: a set of lease locks in one step (DESIGN section 5.3, "A set
-- in one step"). Applied like the earlier versions, with search_path set to fencelock's
-- schema.
--
-- fencelock_lease_acquire_all grants every key of p_keys or none, in one transaction and one
-- statement (a call of this function), each key by the same rules as lease_acquire.sql: the
-- schema's mechanism checked first (fencelock_bind_mechanism, migration 9), a key held while
-- its lease row is live (a writer's lease, a read phase's row, a transaction's claim), the
-- next token under the key's counter row lock by fencelock_next_token (migration 8), refused
-- while the counter is used up (fencelock_token_exhausted), and an expired row overwritten.
--
-- Returns `tokens` (one per key, in the order of p_keys) when granted; otherwise NULL with
-- `live` (NULL: no live epoch) and `exhausted` (some key's counter is used up in the live
-- epoch), the signals of lease_acquire.sql, so the caller starts a new epoch and calls again;
-- and `bound`, the schema's mechanism (only 'lease' grants).
--
-- Rows are locked key by key in the order of p_keys, counter row before lease row as a single
-- grant does: callers pass the keys sorted, so two sets lock their common keys in the same
-- order and a single grant (which locks one key's two rows in the same order) closes no cycle.
-- All the waits together are bounded by p_lock_wait_ms (each wait gets what is left of it as
-- its lock_timeout; past it SQLSTATE 55P03, the whole statement rolls back and the caller
-- reports the set refused).
--
-- All or none: a plain look first refuses a set any of whose keys is held, without locking or
-- writing anything. Then every key is granted inside one block; a key found taken by a racing
-- grant after the look raises FL009 inside it, which undoes every write of the block (its
-- counters' bumps included), and the set is refused with nothing changed.
CREATE FUNCTION fencelock_lease_acquire_all(
    p_keys         text[],
    p_owner        bytea,
    p_ttl_us       float8,
    p_lock_wait_ms bigint
) RETURNS TABLE (tokens bigint[], live bigint, exhausted boolean, bound text)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    serves     text;
    epoch_live bigint;
    deadline   timestamptz;
    left_ms    bigint;
    k          text;
    granted    bigint;
    out_tokens bigint[] := '{}';
BEGIN
    IF p_keys IS NULL OR cardinality(p_keys) = 0 OR array_position(p_keys, NULL) IS NOT NULL
       OR (SELECT count(DISTINCT u) FROM unnest(p_keys) u) <> cardinality(p_keys) THEN
        RAISE EXCEPTION 'fencelock: a set in one step takes one or more distinct keys'
              USING ERRCODE = '22023';
    END IF;
    IF p_lock_wait_ms IS NULL OR p_lock_wait_ms < 1 THEN
        RAISE EXCEPTION 'fencelock: the lock wait of a set is 1 ms or more, got %',
                        coalesce(p_lock_wait_ms::text, 'NULL')
              USING ERRCODE = '22023';
    END IF;
    deadline := clock_timestamp() + p_lock_wait_ms * interval '1 millisecond';
    serves := fencelock_bind_mechanism('lease');
    SELECT e.epoch INTO epoch_live FROM fencelock_epoch_live e WHERE e.one;
    IF serves IS DISTINCT FROM 'lease' THEN
        RETURN QUERY SELECT NULL::bigint[], epoch_live, false, serves;
        RETURN;
    END IF;
    -- The look: any key held refuses the set, before any lock is taken.
    IF EXISTS (
        SELECT 1 FROM fencelock_leases l
         WHERE l.key = ANY (p_keys) AND l.expires_at > clock_timestamp()
    ) THEN
        RETURN QUERY SELECT NULL::bigint[], epoch_live, false, serves;
        RETURN;
    END IF;
    IF epoch_live IS NULL THEN
        RETURN QUERY SELECT NULL::bigint[], NULL::bigint, false, serves;
        RETURN;
    END IF;
    IF EXISTS (
        SELECT 1 FROM fencelock_counters c
         WHERE c.key = ANY (p_keys) AND fencelock_token_exhausted(c.last_token, epoch_live)
    ) THEN
        RETURN QUERY SELECT NULL::bigint[], epoch_live, true, serves;
        RETURN;
    END IF;
    BEGIN
        FOREACH k IN ARRAY p_keys LOOP
            left_ms := ceil(extract(epoch FROM deadline - clock_timestamp()) * 1000)::bigint;
            -- lock_timeout 0 would mean no bound: the last wait gets at least 1 ms.
            PERFORM set_config('lock_timeout', GREATEST(left_ms, 1)::text, true);
            granted := NULL;
            INSERT INTO fencelock_counters AS c (key, last_token)
            VALUES (k, fencelock_next_token(NULL, epoch_live))
            ON CONFLICT (key) DO UPDATE
                SET last_token = fencelock_next_token(c.last_token, epoch_live)
                WHERE NOT EXISTS (
                    SELECT 1 FROM fencelock_leases l
                     WHERE l.key = k AND l.expires_at > clock_timestamp()
                )
                  AND NOT fencelock_token_exhausted(c.last_token, epoch_live)
            RETURNING c.last_token INTO granted;
            IF granted IS NULL THEN
                RAISE EXCEPTION 'fencelock: % was taken during the set', k USING ERRCODE = 'FL009';
            END IF;
            INSERT INTO fencelock_leases AS l (key, owner, token, expires_at)
            VALUES (k, p_owner, granted, clock_timestamp() + p_ttl_us * interval '1 microsecond')
            ON CONFLICT (key) DO UPDATE
                SET owner = EXCLUDED.owner,
                    token = EXCLUDED.token,
                    expires_at = EXCLUDED.expires_at
                WHERE l.expires_at <= clock_timestamp();
            IF NOT FOUND THEN
                RAISE EXCEPTION 'fencelock: % was taken during the set', k USING ERRCODE = 'FL009';
            END IF;
            out_tokens := out_tokens || granted;
        END LOOP;
    EXCEPTION WHEN SQLSTATE 'FL009' THEN
        -- Every write of the block is undone. A racing grant that used up a counter says so,
        -- as the look would have.
        RETURN QUERY SELECT NULL::bigint[], epoch_live,
            EXISTS (
                SELECT 1 FROM fencelock_counters c
                 WHERE c.key = ANY (p_keys) AND fencelock_token_exhausted(c.last_token, epoch_live)
            ), serves;
        RETURN;
    END;
    RETURN QUERY SELECT out_tokens, epoch_live, false, serves;
END
$$;
