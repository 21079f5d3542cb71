-- fencelock schema, version 6: shared (reader) locks on the lease backend (DESIGN sections
-- 4.1 and 5.3). Applied like the earlier versions, with search_path set to fencelock's
-- schema.
--
-- A read phase lives in the key's lease row, as a writer's lease does: its token, its expiry
-- (the latest live reader's) and, as `owner`, the phase's owner followed by the four bytes
-- 'read' (20 bytes, where a writer's or a transaction's owner is 16). The mark sits in the
-- column every statement that installs a new holder writes, so a writer (lease_acquire.sql)
-- or a transaction claim (xact_claim.sql) taking over an expired phase row clears it, and
-- the exclusive extend and release, which match `owner = <16 bytes>`, never match a phase.
-- Beside it, one row per reader with the reader's own expiry by the server's clock.
-- Every change to a key's readers is made while holding the key's lease row lock, so the
-- lease row of a live phase expires with the latest live reader, never before one.
-- Each reader is a new (key, reader) row, so a busy key leaves many dead index entries behind
-- until a vacuum. The functions below look a key's readers up with plain index scans
-- (`SET enable_bitmapscan = off`): a plain index scan marks the dead entries it meets, and the
-- index drops marked entries instead of splitting a full page, where a bitmap scan walks all
-- of them every time (measured with pgbench, two clients each granting and releasing on a
-- key of its own: a reader took 3.5 to 5 times a writer's time, and growing, with bitmap
-- scans; twice a writer's time, steady, with plain index scans).
CREATE UNLOGGED TABLE fencelock_lease_readers (
    key        text        NOT NULL,
    reader     bytea       NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (key, reader)
);

-- The stored owner of a read phase drawn as `p_owner` (16 bytes).
CREATE FUNCTION fencelock_phase_owner(p_owner bytea) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_owner || 'read'::bytea
$$;

-- Forgets the expired readers of the live phase `p_key` (its lease row locked by the
-- caller), then makes the lease row expire with the latest live reader, or deletes it when
-- none is left (the delete trigger wakes waiters). Returns how many readers are left.
CREATE FUNCTION fencelock_lease_read_settle(p_key text, p_now timestamptz) RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_bitmapscan = off
AS $$
DECLARE
    latest timestamptz;
    live   bigint;
BEGIN
    DELETE FROM fencelock_lease_readers r WHERE r.key = p_key AND r.expires_at <= p_now;
    SELECT max(r.expires_at), count(*) INTO latest, live
      FROM fencelock_lease_readers r WHERE r.key = p_key;
    IF live = 0 THEN
        DELETE FROM fencelock_leases l WHERE l.key = p_key;
    ELSE
        UPDATE fencelock_leases l SET expires_at = latest WHERE l.key = p_key;
    END IF;
    RETURN live;
END
$$;

-- A reader's grant: joins the live read phase of `p_key` as `p_reader` (renewing it when
-- already there), or starts a new phase when no live lease holds the key, with the next
-- token by lease_acquire.sql's rule and the phase owner `p_owner` drawn by the client.
-- `p_ttl_us` the reader's ttl in microseconds, `p_lock_timeout` lock_timeout in ms for this
-- transaction. Returns the phase's token and owner (NULL when not granted), the live epoch
-- (NULL: the volatile state was lost) and whether the key's counter is used up in it, as
-- lease_acquire.sql does, so the caller starts a new epoch and asks again when told to.
-- Lock order as in lease_acquire.sql, so the two cannot deadlock: a new phase takes the
-- counter row, then the lease row; a join takes the lease row only; readers rows always
-- after the lease row.
CREATE FUNCTION fencelock_lease_read_acquire(
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
        -- holds the key (the same rule as lease_acquire.sql).
        granted := NULL;
        INSERT INTO fencelock_counters AS c (key, last_token)
        VALUES (p_key, epoch_live * 4294967296 + 1)
        ON CONFLICT (key) DO UPDATE
            SET last_token = CASE WHEN c.last_token >> 32 >= EXCLUDED.last_token >> 32
                                  THEN c.last_token + 1
                                  ELSE EXCLUDED.last_token END
            WHERE NOT EXISTS (
                SELECT 1 FROM fencelock_leases l
                 WHERE l.key = p_key AND l.expires_at > clock_timestamp()
            )
              AND (c.last_token >> 32 < EXCLUDED.last_token >> 32
                   OR (c.last_token & 4294967295) < 4294967295)
        RETURNING c.last_token INTO granted;
        IF granted IS NULL THEN
            IF EXISTS (
                SELECT 1 FROM fencelock_counters c
                 WHERE c.key = p_key
                   AND c.last_token >> 32 >= epoch_live
                   AND (c.last_token & 4294967295) = 4294967295
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

-- Renews reader `p_reader` of the phase (`p_owner`, `p_token`) of `p_key` for `p_ttl_us`
-- microseconds; never re-creates a reader or a phase that is gone. `extended`: renewed;
-- otherwise `superseded` says whether another holder (a writer, another phase) holds the
-- key live.
CREATE FUNCTION fencelock_lease_read_extend(
    p_key    text,
    p_owner  bytea,
    p_token  bigint,
    p_reader bytea,
    p_ttl_us float8
) RETURNS TABLE (extended boolean, superseded boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_bitmapscan = off
AS $$
DECLARE
    now_at timestamptz;
BEGIN
    PERFORM 1 FROM fencelock_leases l
     WHERE l.key = p_key AND l.owner = fencelock_phase_owner(p_owner) AND l.token = p_token
       AND l.expires_at > clock_timestamp()
       FOR UPDATE;
    IF FOUND THEN
        now_at := clock_timestamp();
        UPDATE fencelock_lease_readers r
           SET expires_at = now_at + p_ttl_us * interval '1 microsecond'
         WHERE r.key = p_key AND r.reader = p_reader AND r.expires_at > now_at;
        IF FOUND THEN
            PERFORM fencelock_lease_read_settle(p_key, now_at);
            RETURN QUERY SELECT true, false;
            RETURN;
        END IF;
    END IF;
    RETURN QUERY SELECT false, EXISTS (
        SELECT 1 FROM fencelock_leases l
         WHERE l.key = p_key AND l.expires_at > clock_timestamp()
           AND NOT (l.owner = fencelock_phase_owner(p_owner) AND l.token = p_token)
    );
END
$$;

-- Removes reader `p_reader` from the live phase (`p_owner`, `p_token`) of `p_key`; the last
-- live reader's release ends the phase (deletes its lease row, which wakes waiters).
-- Returns whether the reader was live in that phase. The commit does not wait for a WAL
-- flush, as in lease_release.sql.
CREATE FUNCTION fencelock_lease_read_release(
    p_key    text,
    p_owner  bytea,
    p_token  bigint,
    p_reader bytea
) RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET enable_bitmapscan = off
AS $$
DECLARE
    now_at   timestamptz;
    was_live boolean;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM 1 FROM fencelock_leases l
     WHERE l.key = p_key AND l.owner = fencelock_phase_owner(p_owner) AND l.token = p_token
       AND l.expires_at > clock_timestamp()
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    now_at := clock_timestamp();
    DELETE FROM fencelock_lease_readers r
     WHERE r.key = p_key AND r.reader = p_reader
    RETURNING r.expires_at > now_at INTO was_live;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM fencelock_lease_read_settle(p_key, now_at);
    RETURN was_live;
END
$$;
