-- fencelock schema, version 16: a fair advisory backend (DESIGN sections 4.0.1 and 5.3,
-- "Fair hand-off", the advisory paragraph). Applied like the earlier versions, with
-- search_path set to fencelock's schema.
--
-- Each waiter of a key (a request that keeps trying, with the waiter id it draws once) has a
-- place, as on the lease backend: its arrival (from a sequence) and the time its place
-- lapses by the server's clock (each queued try sets it a place ttl ahead). The advisory
-- lock is tried only by the first live place of its key (or anyone when no place is live).
-- A session advisory lock belongs to the session that took it, so no release can take it on
-- the next waiter's behalf: the release wakes the first live place by name, and that waiter
-- takes the lock with its next try (as MySQL's GET_LOCK backend does, DESIGN 5.4).
-- A waiter that leaves keeps its row for a place ttl, marked `gone`: a try of its request
-- still in flight (sent before the request was dropped, and run after the leave) is then
-- refused and queues nothing, instead of taking a place that would keep a free lock from
-- everyone for a place ttl. A gone row is no place: it is never the head.
-- UNLOGGED like every table a grant writes: a crash empties it, and waiters queue again at
-- their next try.
CREATE SEQUENCE fencelock_advisory_arrivals;

CREATE UNLOGGED TABLE fencelock_advisory_places (
    key       text        NOT NULL,
    waiter    bytea       NOT NULL,
    arrival   bigint      NOT NULL,
    lapses_at timestamptz NOT NULL,
    gone      boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (key, waiter)
);
CREATE INDEX fencelock_advisory_places_order ON fencelock_advisory_places (key, arrival);

-- The payload that tells waiter `p_waiter` it is first in `p_key`'s queue of a free lock: a
-- vertical tab (no key holds a control character, so no key payload starts with one), the
-- waiter's 16 bytes in hex, then the key, whose other waiters (those that hold no place: a
-- reader, a request that waits without queueing) may try too.
CREATE FUNCTION fencelock_turn_payload(p_waiter bytea, p_key text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT chr(11) || encode(p_waiter, 'hex') || p_key
$$;

-- The first live place of `p_key`'s queue (not lapsed, not gone): the waiter a free lock of
-- the key is kept for, or NULL when nobody queues.
CREATE FUNCTION fencelock_advisory_head(p_key text) RETURNS bytea
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN (SELECT p.waiter FROM fencelock_advisory_places p
             WHERE p.key = p_key AND NOT p.gone AND p.lapses_at > clock_timestamp()
             ORDER BY p.arrival LIMIT 1);
END
$$;

-- Tells the waiters of `p_key`, whose lock came free, who may take it: the first live place
-- by name (its turn payload), or, with none, every waiter of the key by the key's name.
CREATE FUNCTION fencelock_advisory_wake(p_key text) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    head bytea := fencelock_advisory_head(p_key);
BEGIN
    PERFORM pg_notify('fencelock_' || current_schema(),
                      CASE WHEN head IS NULL THEN p_key
                           ELSE fencelock_turn_payload(head, p_key) END);
END
$$;

-- A released advisory lock (its holder row deleted) wakes its key's head, or its waiters.
CREATE FUNCTION fencelock_advisory_notify_release() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM fencelock_advisory_wake(OLD.key);
    RETURN OLD;
END
$$;

DROP TRIGGER fencelock_advisory_released ON fencelock_advisory_holders;
CREATE TRIGGER fencelock_advisory_released
    AFTER DELETE ON fencelock_advisory_holders
    FOR EACH ROW EXECUTE FUNCTION fencelock_advisory_notify_release();

-- A queued try of waiter `p_waiter` for advisory lock `p_lock_id` of `p_key`, on the session
-- that will hold it (DESIGN 5.3), when the caller has not tried the lock in this statement.
-- Forgets the key's lapsed places, then tries the session advisory lock only when the waiter
-- has not left and the first live place of the key is its own, or none is live; granted,
-- takes the next token and records the holder as advisory_grant.sql does (the same signals
-- for a lock taken without a token: the caller unlocks, starts a new epoch and tries again),
-- arms `idle_session_timeout` (`p_idle_ms`) and gives up the place. Refused (the lock taken,
-- or kept for an earlier place), adds the waiter's place or refreshes it (`p_place_us` from
-- now, keeping its arrival; a lapsed place was forgotten, so it starts again at the back),
-- and returns `held_us`, the time left of the fencelock holder recorded for the key (NULL
-- when none is recorded as live: the lock kept for the head, or held by plain SQL). A try of
-- a waiter that left (in flight when its request was dropped) takes nothing and queues
-- nothing. `bound` is the schema's mechanism; nothing is tried or queued unless it is
-- 'advisory'.
CREATE FUNCTION fencelock_advisory_acquire_queued(
    p_lock_id  bigint,
    p_key      text,
    p_waiter   bytea,
    p_ttl_us   float8,
    p_idle_ms  text,
    p_place_us float8
) RETURNS TABLE (got boolean, token bigint, live bigint, exhausted boolean, bound text,
                 held_us bigint)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    serves     text;
    epoch_live bigint;
    head       bytea;
    took       boolean := false;
    granted    bigint;
BEGIN
    -- A refused try's place takes a number of a (logged) sequence: no commit waits for it.
    PERFORM set_config('synchronous_commit', 'off', true);
    serves := fencelock_bind_mechanism('advisory');
    SELECT e.epoch INTO epoch_live FROM fencelock_epoch_live e WHERE e.one;
    IF serves IS DISTINCT FROM 'advisory' OR EXISTS (
        SELECT 1 FROM fencelock_advisory_places p
         WHERE p.key = p_key AND p.waiter = p_waiter AND p.gone
           AND p.lapses_at > clock_timestamp()
    ) THEN
        RETURN QUERY SELECT false, NULL::bigint, epoch_live, false, serves, NULL::bigint;
        RETURN;
    END IF;
    -- Lapsed places (and left waiters' rows past their place ttl) are forgotten, so a key
    -- nobody waits for again has no row, and its next first try is the plain grant.
    DELETE FROM fencelock_advisory_places p
     WHERE p.key = p_key AND p.lapses_at <= clock_timestamp();
    head := fencelock_advisory_head(p_key);
    -- Two steps, so that a waiter behind the head never tries the lock.
    IF head IS NULL OR head = p_waiter THEN
        took := pg_try_advisory_lock(p_lock_id);
    END IF;
    IF took THEN
        IF epoch_live IS NOT NULL THEN
            INSERT INTO fencelock_counters AS c (key, last_token)
            VALUES (p_key, fencelock_next_token(NULL, epoch_live))
            ON CONFLICT (key) DO UPDATE
                SET last_token = fencelock_next_token(c.last_token, epoch_live)
                WHERE NOT fencelock_token_exhausted(c.last_token, epoch_live)
            RETURNING c.last_token INTO granted;
        END IF;
        IF granted IS NULL THEN
            RETURN QUERY SELECT true, NULL::bigint, epoch_live,
                COALESCE(epoch_live IS NOT NULL AND EXISTS (
                    SELECT 1 FROM fencelock_counters c
                     WHERE c.key = p_key
                       AND fencelock_token_exhausted(c.last_token, epoch_live)
                ), false),
                serves, NULL::bigint;
            RETURN;
        END IF;
        INSERT INTO fencelock_advisory_holders AS h (key, lock_id, owner, token, pid, expires_at)
        VALUES (p_key, p_lock_id, p_waiter, granted, pg_backend_pid(),
                clock_timestamp() + p_ttl_us * interval '1 microsecond')
        ON CONFLICT (key) DO UPDATE
            SET lock_id = EXCLUDED.lock_id,
                owner = EXCLUDED.owner,
                token = EXCLUDED.token,
                pid = EXCLUDED.pid,
                expires_at = EXCLUDED.expires_at;
        PERFORM set_config('idle_session_timeout', p_idle_ms, false);
        DELETE FROM fencelock_advisory_places p WHERE p.key = p_key AND p.waiter = p_waiter;
        RETURN QUERY SELECT true, granted, epoch_live, false, serves, NULL::bigint;
        RETURN;
    END IF;
    INSERT INTO fencelock_advisory_places AS p (key, waiter, arrival, lapses_at)
    VALUES (p_key, p_waiter, nextval('fencelock_advisory_arrivals'),
            clock_timestamp() + p_place_us * interval '1 microsecond')
    ON CONFLICT (key, waiter) DO UPDATE SET lapses_at = EXCLUDED.lapses_at;
    RETURN QUERY
        SELECT false, NULL::bigint, epoch_live, false, serves,
               (SELECT GREATEST(0, extract(epoch FROM h.expires_at - clock_timestamp())
                                   * 1000000)::bigint
                  FROM fencelock_advisory_holders h
                 WHERE h.key = p_key AND h.expires_at > clock_timestamp());
END
$$;

-- Gives up waiter `p_waiter`'s place in `p_key`'s queue (its row kept `gone` for
-- `p_place_us`, see the table). When the waiter was the first live place and no fencelock
-- holder is recorded as live, the lock may have been kept for it: the new first place is
-- woken by name (or, with none, the key's waiters).
CREATE FUNCTION fencelock_advisory_leave(
    p_key      text,
    p_waiter   bytea,
    p_place_us float8
) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    was_head boolean;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    was_head := fencelock_advisory_head(p_key) IS NOT DISTINCT FROM p_waiter;
    INSERT INTO fencelock_advisory_places AS p (key, waiter, arrival, lapses_at, gone)
    VALUES (p_key, p_waiter, nextval('fencelock_advisory_arrivals'),
            clock_timestamp() + p_place_us * interval '1 microsecond', true)
    ON CONFLICT (key, waiter) DO UPDATE SET lapses_at = EXCLUDED.lapses_at, gone = true;
    IF was_head AND NOT EXISTS (
        SELECT 1 FROM fencelock_advisory_holders h
         WHERE h.key = p_key AND h.expires_at > clock_timestamp()
    ) THEN
        PERFORM fencelock_advisory_wake(p_key);
    END IF;
END
$$;
