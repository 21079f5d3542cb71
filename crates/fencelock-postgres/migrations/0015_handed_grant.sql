-- fencelock schema, version 15: a hand-off tells the waiter its grant (DESIGN section 5.3,
-- "Fair hand-off"), so the waiter takes a handed lock up without a statement of its own.
-- Applied like the earlier versions, with search_path set to fencelock's schema.
--
-- A release (or a leave) that hands the lock to the first live place now sends two
-- notifications, in this order: the grant, a newline then `<waiter hex> <token> <granted>
-- <ttl>` (the server's clock at the grant and the hand-off ttl, both in whole microseconds,
-- rounded down: a grant that looks earlier and shorter than it is can only end the waiter's
-- trust in it sooner), then the waiter's name as version 14 sent it (a tab, then the hex),
-- which processes of earlier versions still wait for. No key holds a control character, so
-- neither payload is a key's.

CREATE FUNCTION fencelock_handed_grant_payload(
    p_waiter  bytea,
    p_token   bigint,
    p_granted timestamptz,
    p_ttl_us  float8
) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT E'\n' || encode(p_waiter, 'hex')
        || ' ' || p_token
        || ' ' || floor(extract(epoch FROM p_granted) * 1000000)::bigint
        || ' ' || floor(p_ttl_us)::bigint
$$;

-- As in version 14, but the hand-off reads the clock once, for the handed row's expiry and
-- for the grant's notification.
CREATE OR REPLACE FUNCTION fencelock_lease_free(
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
    granted_at timestamptz;
    handed_us  float8;
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
            granted_at := clock_timestamp();
            handed_us := least(head.ttl_us, p_handoff_us);
            UPDATE fencelock_leases l
               SET owner = head.waiter,
                   token = granted,
                   expires_at = granted_at + handed_us * interval '1 microsecond'
             WHERE l.key = p_key AND l.owner = p_owner AND l.token = p_token;
            DELETE FROM fencelock_lease_places p
             WHERE p.key = p_key AND p.waiter = head.waiter;
            PERFORM pg_notify('fencelock_' || current_schema(),
                              fencelock_handed_grant_payload(head.waiter, granted,
                                                             granted_at, handed_us));
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
