-- fencelock schema, version 18: the fence is closed to the roles that use it (DESIGN section
-- 8.1, "Who may move the fence"). Applied like the earlier versions, with search_path set to
-- fencelock's schema.
--
-- Until this version every client statement wrote the token counters itself, so a role that
-- could lock needed INSERT and UPDATE on fencelock_counters, and a role that could admit
-- needed them on fencelock_fences: such a role could also set a counter back, lower a fence
-- with an UPDATE, or call fencelock_lower_fence, and then have a stale token admitted.
--
-- Now the tables that carry the safety of every fence (fencelock_counters, fencelock_fences,
-- fencelock_storage, fencelock_epoch, fencelock_epoch_live, fencelock_mechanism) are written
-- only by fencelock's own functions, which run as their owner (SECURITY DEFINER) with the
-- pinned path of version 17. An application role is granted USAGE on the schema, SELECT on
-- its tables and DML on the queue tables alone (the recipe in DESIGN 8.1). What those
-- functions let a caller do is what the lock lets it do, and every change they make to the
-- closed tables moves forward: a counter only rises (fencelock_issue_token), a fence only
-- rises by the admit rule (fencelock_admit_within, fencelock_storage_apply), an epoch starts
-- only when the live one is lost or used up (fencelock_start_epoch). The functions that move
-- anything back or far (fencelock_lower_fence, fencelock_advance_token, and
-- fencelock_new_epoch with its floor) are no longer executable by PUBLIC: the owner calls
-- them, or a role it grants EXECUTE to.

-- The next token of `p_key` in the live epoch, or NULL: when no epoch is live (the volatile
-- state was lost), when the key's counter is used up in the live epoch, or, with
-- `p_unleased`, while the key has a live lease. The client statements' one way to write a
-- counter (sql/lease_grant.sql, sql/advisory_grant.sql, sql/token_grant.sql); it reads the
-- live epoch itself, so a caller cannot push a counter into a later epoch. The lease check
-- runs in the ON CONFLICT's WHERE, under the counter row's lock, against the latest
-- committed lease: two racing acquirers can never both be granted (as in version 5).
CREATE FUNCTION fencelock_issue_token(p_key text, p_unleased boolean) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    live   bigint;
    issued bigint;
BEGIN
    SELECT e.epoch INTO live FROM fencelock_epoch_live e WHERE e.one;
    IF live IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO fencelock_counters AS c (key, last_token)
    VALUES (p_key, fencelock_next_token(NULL, live))
    ON CONFLICT (key) DO UPDATE
        SET last_token = fencelock_next_token(c.last_token, EXCLUDED.last_token >> 32)
        WHERE (NOT p_unleased OR NOT EXISTS (
                  SELECT 1 FROM fencelock_leases l
                   WHERE l.key = p_key AND l.expires_at > clock_timestamp()))
          AND NOT fencelock_token_exhausted(c.last_token, EXCLUDED.last_token >> 32)
    RETURNING c.last_token INTO issued;
    RETURN issued;
END
$$;

-- Starts a new epoch when a grant needs one, and only then: the live epoch is gone (a crash
-- emptied the volatile state), or `p_seen` is the live epoch and a key's counter is used up
-- in it. Another caller having replaced `p_seen` already, it returns the live epoch. In any
-- other case it starts nothing and returns the live epoch, so a caller cannot spend the
-- timeline's epochs. The client statements' one way to start an epoch (sql/new_epoch.sql).
CREATE FUNCTION fencelock_start_epoch(p_seen bigint) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    live bigint;
BEGIN
    SELECT e.epoch INTO live FROM fencelock_epoch_live e WHERE e.one;
    IF live IS NOT NULL AND (live IS DISTINCT FROM p_seen OR NOT EXISTS (
           SELECT 1 FROM fencelock_counters c
            WHERE c.last_token >= (live << 32) + 4294967295)) THEN
        RETURN live;
    END IF;
    RETURN fencelock_new_epoch(p_seen, 0);
END
$$;

-- Every function that writes a closed table runs as its owner.
ALTER FUNCTION fencelock_admit_within(text, bigint, bytea, boolean, interval, interval)
    SECURITY DEFINER;
ALTER FUNCTION fencelock_storage_apply(text, bigint, bytea, boolean, boolean, bytea)
    SECURITY DEFINER;
ALTER FUNCTION fencelock_bind_mechanism(text) SECURITY DEFINER;
ALTER FUNCTION fencelock_lease_acquire_queued(text, bytea, double precision, text, double precision)
    SECURITY DEFINER;
ALTER FUNCTION fencelock_lease_acquire_all(text[], bytea, double precision, bigint)
    SECURITY DEFINER;
ALTER FUNCTION fencelock_lease_free(text, bytea, bigint, double precision) SECURITY DEFINER;
ALTER FUNCTION fencelock_lease_read_acquire(text, bytea, double precision, text, bytea)
    SECURITY DEFINER;
ALTER FUNCTION fencelock_advisory_acquire_queued(bigint, text, bytea, double precision, text, double precision)
    SECURITY DEFINER;
ALTER FUNCTION fencelock_advisory_read(bigint, text, bytea, bytea, double precision, text)
    SECURITY DEFINER;

-- The operator's functions: run as the owner, callable by the owner and by whom it grants.
ALTER FUNCTION fencelock_lower_fence(text, bigint) SECURITY DEFINER;
ALTER FUNCTION fencelock_advance_token(text, bigint) SECURITY DEFINER;
REVOKE EXECUTE ON FUNCTION fencelock_lower_fence(text, bigint) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION fencelock_advance_token(text, bigint) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION fencelock_new_epoch(bigint, bigint) FROM PUBLIC;
