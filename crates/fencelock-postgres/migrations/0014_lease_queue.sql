-- fencelock schema, version 14: a fair lease backend (DESIGN sections 4.0.1 and 5.3, "Fair
-- hand-off"). Applied like the earlier versions, with search_path set to fencelock's schema.
--
-- Each waiter of a key (a request that keeps trying, with the waiter id it draws once) has a
-- place: its arrival (from a sequence), the time its place lapses by the server's clock
-- (each queued try sets it a place ttl ahead) and the ttl it asks for. A free lock goes only
-- to the first live place of its key (or anyone when no place is live); the release hands
-- the lock to that place's waiter in the same transaction and notifies it by name.
-- A waiter that leaves keeps its row for a place ttl, marked `gone`: a try of its request
-- still in flight (sent on another connection before the request was dropped, and run after
-- the leave) is then refused and queues nothing, instead of taking a place that would keep a
-- free lock from everyone for a place ttl. A gone row is no place: it is never the head and
-- never keeps a lock.
-- UNLOGGED like every table a grant writes: a crash empties it with the leases, and waiters
-- queue again at their next try.
CREATE SEQUENCE fencelock_lease_arrivals;

CREATE UNLOGGED TABLE fencelock_lease_places (
    key       text        NOT NULL,
    waiter    bytea       NOT NULL,
    arrival   bigint      NOT NULL,
    lapses_at timestamptz NOT NULL,
    ttl_us    float8      NOT NULL,
    gone      boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (key, waiter)
);
CREATE INDEX fencelock_lease_places_order ON fencelock_lease_places (key, arrival);

-- The payload that tells waiter `p_waiter` the lock was handed to it: a tab (no key holds a
-- control character, so no key payload starts with one) and the waiter's 16 bytes in hex.
CREATE FUNCTION fencelock_handed_payload(p_waiter bytea) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT E'\t' || encode(p_waiter, 'hex')
$$;

-- Frees `p_key`'s lease row held by (`p_owner`, `p_token`): when a live place waits, the row
-- is handed to the first one in the same transaction (its waiter as owner, the next token by
-- fencelock_next_token under the counter row's lock, for the shorter of its asked ttl and
-- `p_handoff_us`), its place is removed and its waiter notified by name; otherwise the row is
-- deleted (the delete trigger wakes the key's waiters). Returns whether the freed lease was
-- live, NULL when no such row was held.
-- Lock order as in lease_acquire.sql: the counter row, then the lease row, then places.
CREATE FUNCTION fencelock_lease_free(
    p_key        text,
    p_owner      bytea,
    p_token      bigint,
    p_handoff_us float8
) RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    was_live   boolean;
    epoch_live bigint;
    head       record;
    granted    bigint;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    IF NOT EXISTS (
        SELECT 1 FROM fencelock_lease_places p
         WHERE p.key = p_key AND p.lapses_at > clock_timestamp() AND NOT p.gone
    ) THEN
        DELETE FROM fencelock_leases l
         WHERE l.key = p_key AND l.owner = p_owner AND l.token = p_token
        RETURNING l.expires_at > clock_timestamp() INTO was_live;
        RETURN was_live;
    END IF;
    SELECT e.epoch INTO epoch_live FROM fencelock_epoch_live e WHERE e.one;
    PERFORM 1 FROM fencelock_counters c WHERE c.key = p_key FOR UPDATE;
    SELECT l.expires_at > clock_timestamp() INTO was_live FROM fencelock_leases l
     WHERE l.key = p_key AND l.owner = p_owner AND l.token = p_token
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    DELETE FROM fencelock_lease_places p
     WHERE p.key = p_key AND p.lapses_at <= clock_timestamp();
    SELECT p.waiter, p.ttl_us INTO head FROM fencelock_lease_places p
     WHERE p.key = p_key AND NOT p.gone ORDER BY p.arrival LIMIT 1 FOR UPDATE;
    IF FOUND AND epoch_live IS NOT NULL THEN
        UPDATE fencelock_counters c
           SET last_token = fencelock_next_token(c.last_token, epoch_live)
         WHERE c.key = p_key AND NOT fencelock_token_exhausted(c.last_token, epoch_live)
        RETURNING c.last_token INTO granted;
        IF granted IS NOT NULL THEN
            UPDATE fencelock_leases l
               SET owner = head.waiter,
                   token = granted,
                   expires_at = clock_timestamp()
                       + least(head.ttl_us, p_handoff_us) * interval '1 microsecond'
             WHERE l.key = p_key AND l.owner = p_owner AND l.token = p_token;
            DELETE FROM fencelock_lease_places p
             WHERE p.key = p_key AND p.waiter = head.waiter;
            PERFORM pg_notify('fencelock_' || current_schema(),
                              fencelock_handed_payload(head.waiter));
            RETURN was_live;
        END IF;
    END IF;
    -- Nobody to hand to, or no token to give (the waiters' own tries start a new epoch).
    DELETE FROM fencelock_leases l
     WHERE l.key = p_key AND l.owner = p_owner AND l.token = p_token;
    RETURN was_live;
END
$$;

-- A queued try of waiter `p_waiter` for `p_key` (DESIGN 5.3): renews a lock handed to this
-- waiter to `p_ttl_us`; otherwise grants a free lock when the first live place is this
-- waiter's or none is live, by lease_acquire.sql's rules (the schema's mechanism, the next
-- token under the counter row's lock, refused while used up, an expired row overwritten);
-- otherwise adds the waiter's place or refreshes it (`p_place_us` from now, keeping its
-- arrival). Returns the token when granted; else `live` and `exhausted` as lease_acquire.sql,
-- and `held_us`, the holder's time left (NULL when the lock is free but kept for the head).
-- `bound` is the schema's mechanism; nothing is granted or queued unless it is 'lease'.
CREATE FUNCTION fencelock_lease_acquire_queued(
    p_key          text,
    p_waiter       bytea,
    p_ttl_us       float8,
    p_lock_timeout text,
    p_place_us     float8
) RETURNS TABLE (token bigint, live bigint, exhausted boolean, bound text, held_us bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    serves     text;
    epoch_live bigint;
    head       bytea;
    granted    bigint;
    left_us    bigint;
BEGIN
    PERFORM set_config('lock_timeout', p_lock_timeout, true);
    PERFORM set_config('synchronous_commit', 'off', true);
    serves := fencelock_bind_mechanism('lease');
    SELECT e.epoch INTO epoch_live FROM fencelock_epoch_live e WHERE e.one;
    IF serves IS DISTINCT FROM 'lease' THEN
        RETURN QUERY SELECT NULL::bigint, epoch_live, false, serves, NULL::bigint;
        RETURN;
    END IF;
    -- A try of a waiter that left (in flight when its request was dropped): nothing.
    IF EXISTS (
        SELECT 1 FROM fencelock_lease_places p
         WHERE p.key = p_key AND p.waiter = p_waiter AND p.gone
           AND p.lapses_at > clock_timestamp()
    ) THEN
        RETURN QUERY SELECT NULL::bigint, epoch_live, false, serves, NULL::bigint;
        RETURN;
    END IF;
    -- The lock handed to this waiter by a release: take it up for the waiter's ttl.
    UPDATE fencelock_leases l
       SET expires_at = clock_timestamp() + p_ttl_us * interval '1 microsecond'
     WHERE l.key = p_key AND l.owner = p_waiter AND l.expires_at > clock_timestamp()
    RETURNING l.token INTO granted;
    IF granted IS NOT NULL THEN
        DELETE FROM fencelock_lease_places p WHERE p.key = p_key AND p.waiter = p_waiter;
        RETURN QUERY SELECT granted, epoch_live, false, serves, NULL::bigint;
        RETURN;
    END IF;
    DELETE FROM fencelock_lease_places p
     WHERE p.key = p_key AND p.lapses_at <= clock_timestamp();
    SELECT p.waiter INTO head FROM fencelock_lease_places p
     WHERE p.key = p_key AND NOT p.gone ORDER BY p.arrival LIMIT 1;
    SELECT GREATEST(0, extract(epoch FROM l.expires_at - clock_timestamp()) * 1000000)::bigint
      INTO left_us
      FROM fencelock_leases l WHERE l.key = p_key AND l.expires_at > clock_timestamp();
    IF left_us IS NULL AND (head IS NULL OR head = p_waiter) THEN
        IF epoch_live IS NULL THEN
            RETURN QUERY SELECT NULL::bigint, NULL::bigint, false, serves, NULL::bigint;
            RETURN;
        END IF;
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
        IF granted IS NOT NULL THEN
            INSERT INTO fencelock_leases AS l (key, owner, token, expires_at)
            VALUES (p_key, p_waiter, granted,
                    clock_timestamp() + p_ttl_us * interval '1 microsecond')
            ON CONFLICT (key) DO UPDATE
                SET owner = EXCLUDED.owner,
                    token = EXCLUDED.token,
                    expires_at = EXCLUDED.expires_at
                WHERE l.expires_at <= clock_timestamp();
            IF FOUND THEN
                DELETE FROM fencelock_lease_places p
                 WHERE p.key = p_key AND p.waiter = p_waiter;
                RETURN QUERY SELECT granted, epoch_live, false, serves, NULL::bigint;
                RETURN;
            END IF;
            -- A racing grant won the row (the token taken is a gap): queue.
        ELSIF EXISTS (
            SELECT 1 FROM fencelock_counters c
             WHERE c.key = p_key AND fencelock_token_exhausted(c.last_token, epoch_live)
        ) THEN
            RETURN QUERY SELECT NULL::bigint, epoch_live, true, serves, NULL::bigint;
            RETURN;
        END IF;
    END IF;
    INSERT INTO fencelock_lease_places AS p (key, waiter, arrival, lapses_at, ttl_us)
    VALUES (p_key, p_waiter, nextval('fencelock_lease_arrivals'),
            clock_timestamp() + p_place_us * interval '1 microsecond', p_ttl_us)
    ON CONFLICT (key, waiter) DO UPDATE
        SET lapses_at = EXCLUDED.lapses_at, ttl_us = EXCLUDED.ttl_us, gone = false;
    RETURN QUERY SELECT NULL::bigint, epoch_live, false, serves, left_us;
END
$$;

-- Gives up waiter `p_waiter`'s place in `p_key`'s queue (its row kept `gone` for
-- `p_place_us`, see the table), and a lock handed to it (freed as a release frees it: handed
-- on to the next place). Looked for before and after the place is given up, so a hand-off
-- that committed in between is freed too. When the waiter had a place and the lock is free,
-- the key's waiters are woken to try (the lock may have been kept for this one).
CREATE FUNCTION fencelock_lease_leave(
    p_key        text,
    p_waiter     bytea,
    p_handoff_us float8,
    p_place_us   float8
) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    handed bigint;
    placed boolean;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    SELECT l.token INTO handed FROM fencelock_leases l
     WHERE l.key = p_key AND l.owner = p_waiter;
    IF FOUND THEN
        PERFORM fencelock_lease_free(p_key, p_waiter, handed, p_handoff_us);
    END IF;
    placed := EXISTS (
        SELECT 1 FROM fencelock_lease_places p
         WHERE p.key = p_key AND p.waiter = p_waiter AND NOT p.gone
           AND p.lapses_at > clock_timestamp()
    );
    INSERT INTO fencelock_lease_places AS p (key, waiter, arrival, lapses_at, ttl_us, gone)
    VALUES (p_key, p_waiter, nextval('fencelock_lease_arrivals'),
            clock_timestamp() + p_place_us * interval '1 microsecond', 0, true)
    ON CONFLICT (key, waiter) DO UPDATE SET lapses_at = EXCLUDED.lapses_at, gone = true;
    SELECT l.token INTO handed FROM fencelock_leases l
     WHERE l.key = p_key AND l.owner = p_waiter;
    IF FOUND THEN
        PERFORM fencelock_lease_free(p_key, p_waiter, handed, p_handoff_us);
    ELSIF placed AND NOT EXISTS (
        SELECT 1 FROM fencelock_leases l
         WHERE l.key = p_key AND l.expires_at > clock_timestamp()
    ) THEN
        PERFORM pg_notify('fencelock_' || current_schema(), p_key);
    END IF;
END
$$;
