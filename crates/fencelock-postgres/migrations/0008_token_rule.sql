-- fencelock schema, version 8: the next-token rule and the "counter used up" rule, each
-- written once (DESIGN section 5.3, "Tokens: a durable epoch over volatile counters").
-- Applied like the earlier versions, with search_path set to fencelock's schema.
--
-- Until version 7 both rules were spelled out in every grant: lease_acquire.sql,
-- advisory_acquire.sql, token_grant.sql, fencelock_lease_read_acquire (version 6) and
-- fencelock_advisory_read (version 7). They now call the two functions below, and the two
-- PL/pgSQL functions are redefined to do so (same signatures, same behaviour).
--
-- Both are plain SQL expressions (LANGUAGE sql, IMMUTABLE, not STRICT, no SET clause), so the
-- planner inlines them into the calling statement: a grant evaluates the same arithmetic as
-- before, with no function call at run time. A SET clause (such as search_path) would stop the
-- inlining; neither needs one, as neither reads a table. fencelock_next_token names
-- fencelock_token_exhausted schema-qualified instead (written in below by format, as version 3
-- does), because an inlined body is parsed with the caller's search_path, not this one.

-- The counter held in `p_last` (a key's last token, epoch * 2^32 + counter) is used up in live
-- epoch `p_live`: the row is at that epoch or later and its counter is at 2^32 - 1. Such a key
-- gets no token until a new epoch starts (fencelock_new_epoch(p_live)). NULL when `p_last` or
-- `p_live` is NULL (no row: nothing is used up).
CREATE FUNCTION fencelock_token_exhausted(p_last bigint, p_live bigint) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_last >> 32 >= p_live AND (p_last & 4294967295) = 4294967295
$$;

-- The next token of a key whose last token is `p_last` (NULL: no row yet) in live epoch
-- `p_live`: `p_last + 1` when the row is at the live epoch or later, else the live epoch's
-- first token `p_live * 2^32 + 1`; NULL when the counter is used up (nothing to hand out; the
-- counters' NOT NULL refuses it should a caller write it anyway). Evaluated under the key's
-- counter row lock, this is the order the safety argument rests on: a key's row never goes
-- down, and epochs never overlap.
DO $$
BEGIN
    EXECUTE format(
        'CREATE FUNCTION fencelock_next_token(p_last bigint, p_live bigint) RETURNS bigint '
        || 'LANGUAGE sql IMMUTABLE PARALLEL SAFE AS %L',
        'SELECT CASE WHEN p_last IS NULL OR p_last >> 32 < p_live '
        || 'THEN p_live * 4294967296 + 1 '
        || format('WHEN NOT %I.fencelock_token_exhausted(p_last, p_live) ', current_schema())
        || 'THEN p_last + 1 END');
END
$$;

-- Version 6's reader grant on the lease backend, with the two rules called, not spelled out.
CREATE OR REPLACE FUNCTION fencelock_lease_read_acquire(
    p_key          text,
    p_reader       bytea,
    p_ttl_us       float8,
    p_lock_timeout text,
    p_owner        bytea
) RETURNS TABLE (token bigint, owner bytea, live bigint, exhausted boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_bitmapscan = off
AS $$
DECLARE
    epoch_live bigint;
    held       record;
    now_at     timestamptz;
    granted    bigint;
    phase      bytea := fencelock_phase_owner(p_owner);
BEGIN
    PERFORM set_config('lock_timeout', p_lock_timeout, true);
    SELECT e.epoch INTO epoch_live FROM fencelock_epoch_live e WHERE e.one;
    -- Three rounds: a racing grant may start a phase (join it) or take the key (refused)
    -- between a look and a write.
    FOR attempt IN 1..3 LOOP
        SELECT l.owner, l.token INTO held FROM fencelock_leases l
         WHERE l.key = p_key AND l.expires_at > clock_timestamp();
        IF FOUND AND octet_length(held.owner) <> 20 THEN
            -- A writer's lease or a transaction's claim.
            RETURN QUERY SELECT NULL::bigint, NULL::bytea, epoch_live, false;
            RETURN;
        END IF;
        IF FOUND THEN
            -- Join: lock the phase's row as it still is, then decide by one clock reading.
            SELECT l.owner, l.token INTO held FROM fencelock_leases l
             WHERE l.key = p_key AND l.owner = held.owner AND l.token = held.token
               AND l.expires_at > clock_timestamp()
               FOR UPDATE;
            IF FOUND THEN
                now_at := clock_timestamp();
                INSERT INTO fencelock_lease_readers AS r (key, reader, expires_at)
                VALUES (p_key, p_reader, now_at + p_ttl_us * interval '1 microsecond')
                ON CONFLICT (key, reader) DO UPDATE SET expires_at = EXCLUDED.expires_at;
                PERFORM fencelock_lease_read_settle(p_key, now_at);
                RETURN QUERY SELECT held.token, substring(held.owner FROM 1 FOR 16),
                                    epoch_live, false;
                RETURN;
            END IF;
            CONTINUE;
        END IF;
        IF epoch_live IS NULL THEN
            RETURN QUERY SELECT NULL::bigint, NULL::bytea, NULL::bigint, false;
            RETURN;
        END IF;
        -- A new phase: the next token under the counter row's lock, only while no live lease
        -- holds the key (as lease_acquire.sql).
        granted := NULL;
        INSERT INTO fencelock_counters AS c (key, last_token)
        VALUES (p_key, fencelock_next_token(NULL, epoch_live))
        ON CONFLICT (key) DO UPDATE
            SET last_token = fencelock_next_token(c.last_token, epoch_live)
            WHERE NOT EXISTS (
                SELECT 1 FROM fencelock_leases l
                 WHERE l.key = p_key AND l.expires_at > clock_timestamp()
            )
              AND NOT fencelock_token_exhausted(c.last_token, epoch_live)
        RETURNING c.last_token INTO granted;
        IF granted IS NULL THEN
            IF EXISTS (
                SELECT 1 FROM fencelock_counters c
                 WHERE c.key = p_key AND fencelock_token_exhausted(c.last_token, epoch_live)
            ) THEN
                RETURN QUERY SELECT NULL::bigint, NULL::bytea, epoch_live, true;
                RETURN;
            END IF;
            -- A lease went live since the look: look again.
            CONTINUE;
        END IF;
        now_at := clock_timestamp();
        INSERT INTO fencelock_leases AS l (key, owner, token, expires_at)
        VALUES (p_key, phase, granted, now_at + p_ttl_us * interval '1 microsecond')
        ON CONFLICT (key) DO UPDATE
            SET owner = EXCLUDED.owner,
                token = EXCLUDED.token,
                expires_at = EXCLUDED.expires_at
            WHERE l.expires_at <= clock_timestamp();
        IF FOUND THEN
            -- Readers of phases gone by are all expired (their phase row outlived them).
            DELETE FROM fencelock_lease_readers r WHERE r.key = p_key;
            INSERT INTO fencelock_lease_readers (key, reader, expires_at)
            VALUES (p_key, p_reader, now_at + p_ttl_us * interval '1 microsecond');
            RETURN QUERY SELECT granted, p_owner, epoch_live, false;
            RETURN;
        END IF;
        -- A racing grant won the row (the token taken is a gap): join it or be refused.
    END LOOP;
    RETURN QUERY SELECT NULL::bigint, NULL::bytea, epoch_live, false;
END
$$;

-- Version 7's reader grant on the advisory backend, with the two rules called, not spelled
-- out.
CREATE OR REPLACE FUNCTION fencelock_advisory_read(
    p_lock_id   bigint,
    p_key       text,
    p_reader    bytea,
    p_owner     bytea,
    p_ttl_us    float8,
    p_lock_wait text
) RETURNS TABLE (r_got boolean, r_token bigint, r_owner bytea, r_live bigint, r_exhausted boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    me          integer := pg_backend_pid();
    sharers     integer[];
    phase_owner bytea;
    phase_token bigint;
    counter_at  bigint;
    live        bigint;
    v_token     bigint;
BEGIN
    PERFORM set_config('lock_timeout', p_lock_wait, true);
    IF NOT pg_try_advisory_lock_shared(p_lock_id) THEN
        RETURN QUERY SELECT false, NULL::bigint, NULL::bytea, NULL::bigint, false;
        RETURN;
    END IF;
    SELECT ph.owner, ph.token INTO phase_owner, phase_token
      FROM fencelock_advisory_phases ph WHERE ph.key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO fencelock_advisory_phases AS ph (key) VALUES (p_key)
        ON CONFLICT (key) DO NOTHING;
        SELECT ph.owner, ph.token INTO phase_owner, phase_token
          FROM fencelock_advisory_phases ph WHERE ph.key = p_key FOR UPDATE;
    END IF;
    SELECT coalesce(array_agg(l.pid), '{}') INTO sharers
      FROM pg_locks l
     WHERE l.locktype = 'advisory'
       AND l.granted
       AND l.mode = 'ShareLock'
       AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
       AND l.classid = ((p_lock_id >> 32) & 4294967295)::oid
       AND l.objid = (p_lock_id & 4294967295)::oid
       AND l.objsubid = 1;
    -- A row of this very session is left over from an earlier session with the same pid.
    DELETE FROM fencelock_advisory_readers r
     WHERE r.key = p_key AND (r.pid = me OR NOT (r.pid = ANY (sharers)));
    -- While this session holds the shared lock no writer holds the key: a holder row left by
    -- a writer whose session ended must not pass for live should its pid be reused by a
    -- reader (advisory_inspect.sql matches a holder row by pid and lock id).
    DELETE FROM fencelock_advisory_holders h WHERE h.key = p_key;
    SELECT c.last_token INTO counter_at FROM fencelock_counters c WHERE c.key = p_key;
    IF phase_token IS NOT NULL AND phase_token = counter_at AND EXISTS (
        SELECT 1 FROM fencelock_advisory_readers r
         WHERE r.key = p_key AND r.token = phase_token AND r.owner = phase_owner
    ) THEN
        v_token := phase_token;
    ELSE
        SELECT e.epoch INTO live FROM fencelock_epoch_live e WHERE e.one;
        IF live IS NOT NULL THEN
            INSERT INTO fencelock_counters AS c (key, last_token)
            VALUES (p_key, fencelock_next_token(NULL, live))
            ON CONFLICT (key) DO UPDATE
                SET last_token = fencelock_next_token(c.last_token, live)
                WHERE NOT fencelock_token_exhausted(c.last_token, live)
            RETURNING c.last_token INTO v_token;
        END IF;
        IF v_token IS NULL THEN
            PERFORM pg_advisory_unlock_shared(p_lock_id);
            RETURN QUERY SELECT true, NULL::bigint, NULL::bytea, live,
                coalesce(EXISTS (
                    SELECT 1 FROM fencelock_counters c
                     WHERE c.key = p_key AND fencelock_token_exhausted(c.last_token, live)
                ), false);
            RETURN;
        END IF;
        phase_owner := p_owner;
        UPDATE fencelock_advisory_phases ph
           SET owner = phase_owner, token = v_token
         WHERE ph.key = p_key;
    END IF;
    INSERT INTO fencelock_advisory_readers AS r
           (key, reader, lock_id, owner, token, pid, expires_at)
    VALUES (p_key, p_reader, p_lock_id, phase_owner, v_token, me,
            clock_timestamp() + p_ttl_us * interval '1 microsecond')
    ON CONFLICT (key, reader) DO UPDATE
        SET lock_id = EXCLUDED.lock_id,
            owner = EXCLUDED.owner,
            token = EXCLUDED.token,
            pid = EXCLUDED.pid,
            expires_at = EXCLUDED.expires_at;
    RETURN QUERY SELECT true, v_token, phase_owner, live, false;
END
$$;
