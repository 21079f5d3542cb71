-- fencelock schema, version 16: a release also answers the grant it handed over (DESIGN
-- section 5.3, "Fair hand-off"), so a releasing process hands the lock to a waiter of its own
-- without waiting for the notification's trip through the server.
-- Applied like the earlier versions, with search_path set to fencelock's schema.
--
-- fencelock_lease_release does what fencelock_lease_free of version 15 did and answers, beside
-- whether the released lease was live, the payload of the grant notification it sent (NULL
-- when it handed to nobody). fencelock_lease_free keeps its signature and answer for processes
-- of earlier versions, which call it during a rolling upgrade.

CREATE FUNCTION fencelock_lease_release(
    p_key        text,
    p_owner      bytea,
    p_token      bigint,
    p_handoff_us float8,
    OUT live     boolean,
    OUT handed   text
)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
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
        RETURNING l.expires_at > clock_timestamp() INTO live;
        RETURN;
    END IF;
    SELECT e.epoch INTO epoch_live FROM fencelock_epoch_live e WHERE e.one;
    PERFORM 1 FROM fencelock_counters c WHERE c.key = p_key FOR UPDATE;
    SELECT l.expires_at > clock_timestamp() INTO live FROM fencelock_leases l
     WHERE l.key = p_key AND l.owner = p_owner AND l.token = p_token
       FOR UPDATE;
    IF NOT FOUND THEN
        live := NULL;
        RETURN;
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
            handed := fencelock_handed_grant_payload(head.waiter, granted, granted_at,
                                                     handed_us);
            PERFORM pg_notify('fencelock_' || current_schema(), handed);
            PERFORM pg_notify('fencelock_' || current_schema(),
                              fencelock_handed_payload(head.waiter));
            RETURN;
        END IF;
    END IF;
    -- Nobody to hand to, or no token to give (the waiters' own tries start a new epoch).
    DELETE FROM fencelock_leases l
     WHERE l.key = p_key AND l.owner = p_owner AND l.token = p_token;
END
$$;

CREATE OR REPLACE FUNCTION fencelock_lease_free(
    p_key        text,
    p_owner      bytea,
    p_token      bigint,
    p_handoff_us float8
) RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT r.live FROM fencelock_lease_release(p_key, p_owner, p_token, p_handoff_us) r
$$;
