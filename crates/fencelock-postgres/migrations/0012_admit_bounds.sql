-- fencelock schema, version 12: fencelock_admit bounds a fenced transaction's idle time and
-- its own wait, refuses a token this schema's counter never granted, and has a way back
-- from a fence no lock service granted; installing a row guard prints no NOTICE (DESIGN
-- section 5.3, "Fence your own tables").
-- Applied like the earlier versions, with search_path set to fencelock's schema.
--
-- Until this version a holder that admitted and then paused kept the fence record's row lock
-- for as long as it paused: its successor's admit waited without bound, and the paused
-- transaction could still commit. And any token was admitted, 9223372036854775807 too, after
-- which every real holder of the resource was refused, with nothing to undo it but editing
-- the table by hand.

-- A duration setting as milliseconds: `current_setting` shows it with a unit ('30s', '100ms',
-- '5min', '0'), which an interval reads.
CREATE FUNCTION fencelock_setting_ms(p_name text) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT ceil(extract(epoch FROM current_setting(p_name)::interval) * 1000)::bigint
$$;

-- The bound a fenced transaction gets when the caller names none: the setting
-- fencelock.admit_idle_timeout (SET, SET LOCAL, ALTER ROLE ... SET), else 30 s, the default
-- lease ttl (a transaction idle for a whole lease is a holder that stopped).
CREATE FUNCTION fencelock_admit_default(p_name text, p_default interval) RETURNS interval
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(nullif(current_setting(p_name, true), '')::interval, p_default)
$$;

-- fencelock_admit with its bounds given: p_idle, the longest the caller's transaction may sit
-- idle from now on (its session is then ended by the server and the transaction rolled back:
-- a transaction-local idle_in_transaction_session_timeout; zero: none); p_wait, the longest
-- this admit waits for another transaction holding the resource's fence record (a lock_timeout
-- for this statement only, SQLSTATE 55P03 past it; zero: no bound of ours). A stricter bound
-- the caller already set (a smaller non-zero value) is kept.
--
-- A token above the last one this schema's counter granted for the key of the same name (the
-- lease and advisory backends' and the transaction API's keys) is refused with FL008: no grant
-- of this schema handed it out. A resource fenced by another lock service's tokens has no
-- counter here and is not checked.
CREATE FUNCTION fencelock_admit_within(
    p_resource text,
    p_token    bigint,
    p_owner    bytea,
    p_strict   boolean,
    p_idle     interval,
    p_wait     interval
) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    cur_token  bigint;
    cur_owner  bytea;
    granted    bigint;
    idle_ms    bigint;
    wait_ms    bigint;
    their_wait text;
BEGIN
    IF p_resource IS NULL OR p_resource = '' OR octet_length(p_resource) > 512
       OR p_resource ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'fencelock: invalid resource name %: use 1 to 512 bytes without '
                        'control characters', coalesce(quote_literal(left(p_resource, 64)), 'NULL')
              USING ERRCODE = '22023';
    END IF;
    PERFORM fencelock_check_fence(p_token, p_owner);
    IF p_idle IS NULL OR p_idle < interval '0' OR p_wait IS NULL OR p_wait < interval '0' THEN
        RAISE EXCEPTION 'fencelock: the idle bound and the wait of an admit are durations of '
                        'zero or more, got % and %',
                        coalesce(p_idle::text, 'NULL'), coalesce(p_wait::text, 'NULL')
              USING ERRCODE = '22023';
    END IF;
    -- Both settings take milliseconds up to 2^31 - 1 (about 24 days).
    idle_ms := LEAST(ceil(extract(epoch FROM p_idle) * 1000), 2147483647);
    wait_ms := LEAST(ceil(extract(epoch FROM p_wait) * 1000), 2147483647);

    SELECT c.last_token INTO granted FROM fencelock_counters c WHERE c.key = p_resource;
    IF granted IS NOT NULL AND p_token > granted THEN
        -- Read again with a row lock: under READ COMMITTED it sees the newest grant; under
        -- REPEATABLE READ a grant after the transaction's snapshot fails with 40001 (retry)
        -- instead of refusing a token that was granted.
        SELECT c.last_token INTO granted FROM fencelock_counters c
         WHERE c.key = p_resource FOR KEY SHARE;
        IF granted IS NOT NULL AND p_token > granted THEN
            RAISE EXCEPTION 'fencelock: token % for % was never granted: the key''s counter in '
                            'schema % has granted up to token %', p_token, p_resource,
                            current_schema(), granted
                  USING ERRCODE = 'FL008',
                        DETAIL = format('presented token %s, granted up to %s, key %s',
                                        p_token, granted, p_resource),
                        HINT = 'Present the fence of a grant of this key; a fence recorded '
                            || 'before this check can be lowered with fencelock_lower_fence.';
        END IF;
    END IF;

    IF idle_ms > 0 AND (fencelock_setting_ms('idle_in_transaction_session_timeout') = 0
                        OR idle_ms < fencelock_setting_ms('idle_in_transaction_session_timeout')) THEN
        PERFORM set_config('idle_in_transaction_session_timeout', idle_ms::text, true);
    END IF;
    their_wait := current_setting('lock_timeout');
    IF wait_ms > 0 AND (fencelock_setting_ms('lock_timeout') = 0
                        OR wait_ms < fencelock_setting_ms('lock_timeout')) THEN
        PERFORM set_config('lock_timeout', wait_ms::text, true);
    END IF;
    -- ON CONFLICT locks the existing row even when its WHERE is false.
    INSERT INTO fencelock_fences AS f (resource, token, owner)
    VALUES (p_resource, p_token, p_owner)
    ON CONFLICT (resource) DO UPDATE
        SET token = EXCLUDED.token,
            owner = EXCLUDED.owner
        WHERE (f.token, f.owner) IS DISTINCT FROM (EXCLUDED.token, EXCLUDED.owner)
          AND fencelock_admits(f.token, f.owner, EXCLUDED.token, EXCLUDED.owner, p_strict);
    IF FOUND THEN
        PERFORM set_config('lock_timeout', their_wait, true);
        RETURN;
    END IF;
    PERFORM set_config('lock_timeout', their_wait, true);
    -- Neither inserted nor advanced: the row is locked by us, so this is the fence that decided.
    SELECT f.token, f.owner INTO cur_token, cur_owner
      FROM fencelock_fences f
     WHERE f.resource = p_resource;
    IF NOT p_strict AND cur_token = p_token AND cur_owner = p_owner THEN
        RETURN;
    END IF;
    PERFORM fencelock_raise_stale(p_resource, p_token, p_owner, cur_token, cur_owner);
END
$$;

-- The admit of SQL callers, same signature as before: its bounds come from the settings
-- fencelock.admit_idle_timeout (default 30 s) and fencelock.admit_wait (default 30 s: a
-- successor waits out a predecessor that paused for as long as the idle bound allows).
CREATE OR REPLACE FUNCTION fencelock_admit(
    p_resource text,
    p_token    bigint,
    p_owner    bytea,
    p_strict   boolean DEFAULT false
) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM fencelock_admit_within(
        p_resource, p_token, p_owner, p_strict,
        fencelock_admit_default('fencelock.admit_idle_timeout', interval '30 s'),
        fencelock_admit_default('fencelock.admit_wait', interval '30 s'));
END
$$;

-- The healing step for a resource whose recorded fence no lock service granted (a token
-- admitted before version 12, or from another service, which cannot be checked here): sets the
-- fence of p_resource to p_token with an owner no holder has (16 zero bytes), so that from now
-- on exactly the tokens above p_token are admitted. Call it with the last token the lock
-- service granted for the key (`fencelock inspect K` shows it): every holder granted so far
-- is refused, the next grant is admitted. Only lowers: a p_token at or above the recorded
-- token is refused (22023), and so is one below the last token this schema's counter granted
-- for the key of that name (holders granted up to it could be admitted again). Takes the
-- record's row lock, so it waits for a transaction that admitted the resource. Returns the
-- token it replaced, NULL when the resource has no fence record (nothing to lower).
CREATE FUNCTION fencelock_lower_fence(p_resource text, p_token bigint) RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    was     bigint;
    granted bigint;
BEGIN
    IF p_token IS NULL OR p_token < 1 THEN
        RAISE EXCEPTION 'fencelock: % is not a fencing token (tokens are 1 or more)',
                        coalesce(p_token::text, 'NULL')
              USING ERRCODE = '22023';
    END IF;
    SELECT f.token INTO was FROM fencelock_fences f WHERE f.resource = p_resource FOR UPDATE;
    IF was IS NULL THEN
        RETURN NULL;
    END IF;
    IF p_token >= was THEN
        RAISE EXCEPTION 'fencelock: the fence of % is at token %; fencelock_lower_fence only '
                        'lowers it, not to %', p_resource, was, p_token
              USING ERRCODE = '22023';
    END IF;
    SELECT c.last_token INTO granted FROM fencelock_counters c WHERE c.key = p_resource;
    IF granted IS NOT NULL AND p_token < granted THEN
        RAISE EXCEPTION 'fencelock: cannot lower the fence of % to token %: this schema''s '
                        'counter has granted up to token %, and its holders would be admitted '
                        'again', p_resource, p_token, granted
              USING ERRCODE = '22023';
    END IF;
    UPDATE fencelock_fences f
       SET token = p_token, owner = '\x00000000000000000000000000000000'::bytea
     WHERE f.resource = p_resource;
    RETURN was;
END
$$;

-- Installing a guard drops the triggers it replaces with DROP TRIGGER IF EXISTS, which says
-- "NOTICE: trigger ... does not exist, skipping" on a table guarded for the first time; so
-- does removing a guard that is not there. Neither is news: both functions now run with
-- client_min_messages = warning (restored when they return), and warnings and errors still
-- reach the caller.
ALTER FUNCTION fencelock_guard_table(regclass, name, name, boolean)
    SET client_min_messages = warning;
ALTER FUNCTION fencelock_unguard_table(regclass) SET client_min_messages = warning;
