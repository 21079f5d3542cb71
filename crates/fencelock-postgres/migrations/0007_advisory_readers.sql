-- fencelock schema, version 7: shared (reader) locks on the advisory backend (DESIGN section
-- 5.3, "Readers on the advisory backend"). Applied like the earlier versions, with
-- search_path set to fencelock's schema.
--
-- A reader holds pg_try_advisory_lock_shared(lock id) on a session of its own, as a writer
-- holds pg_try_advisory_lock: shared and exclusive advisory locks conflict on the server, so
-- readers and writers (the advisory backend's grants, the transaction API's
-- pg_advisory_xact_lock, plain SQL) exclude each other with no state of fencelock's. What the
-- tables below add is the read phase's one fence. Both are UNLOGGED, like the counters whose
-- tokens they hold: crash recovery empties them together.

-- The last read phase of each key: its fence (owner NULL and token NULL until a first phase).
-- The row is also what serialises the reader grants of a key (locked FOR UPDATE by each),
-- so two readers arriving together cannot start two phases. Never deleted, like a counter.
CREATE UNLOGGED TABLE fencelock_advisory_phases (
    key   text   PRIMARY KEY,
    owner bytea,
    token bigint
);

-- One row per reader: its id (chosen by the caller), the fence of the phase it joined, and
-- the session holding its shared lock. A row counts only while `pid` still holds the shared
-- advisory lock `lock_id` (checked against pg_locks), as for fencelock_advisory_holders.
CREATE UNLOGGED TABLE fencelock_advisory_readers (
    key        text        NOT NULL,
    reader     bytea       NOT NULL,
    lock_id    bigint      NOT NULL,
    owner      bytea       NOT NULL,
    token      bigint      NOT NULL,
    pid        integer     NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (key, reader)
);

-- A reader leaving wakes a waiter of the key (a writer waiting for the phase to end).
CREATE TRIGGER fencelock_advisory_reader_released
    AFTER DELETE ON fencelock_advisory_readers
    FOR EACH ROW EXECUTE FUNCTION fencelock_notify_release();

-- A reader's grant, on the session that will hold it. Takes the shared advisory lock without
-- waiting (refused while a writer holds the lock or waits for it), then, under the phase
-- row's lock, joins the key's recorded phase or starts a new one:
-- - join (the phase's token and owner) only when (a) the phase's token is still the key
--   counter's last token: no writer, transaction or advance_token took a token since the
--   phase started; and (b) another reader of that phase is live: its row's session holds the
--   shared lock now. (a) keeps every writer's token between phases; (b) ends a phase with its
--   last reader.
-- - otherwise a new phase: the next token by the rule of advisory_acquire.sql (row at the
--   live epoch or later and counter below 2^32 - 1: last_token + 1, else live * 2^32 + 1),
--   owner `p_owner`. No token (no live epoch, or the counter used up) unlocks the shared lock
--   and returns r_live and r_exhausted for the caller, who starts a new epoch and asks again.
-- Rows of readers whose session no longer holds the lock, and the key's writer row (stale
-- while a shared lock is held), are forgotten on the way.
-- lock_timeout (`p_lock_wait`) bounds the waits for the phase and counter rows, for this
-- statement's transaction only.
CREATE FUNCTION fencelock_advisory_read(
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
            VALUES (p_key, live * 4294967296 + 1)
            ON CONFLICT (key) DO UPDATE
                SET last_token = CASE WHEN c.last_token >> 32 >= EXCLUDED.last_token >> 32
                                      THEN c.last_token + 1
                                      ELSE EXCLUDED.last_token END
                WHERE c.last_token >> 32 < EXCLUDED.last_token >> 32
                   OR (c.last_token & 4294967295) < 4294967295
            RETURNING c.last_token INTO v_token;
        END IF;
        IF v_token IS NULL THEN
            PERFORM pg_advisory_unlock_shared(p_lock_id);
            RETURN QUERY SELECT true, NULL::bigint, NULL::bytea, live,
                coalesce(EXISTS (
                    SELECT 1 FROM fencelock_counters c
                     WHERE c.key = p_key
                       AND c.last_token >> 32 >= live
                       AND (c.last_token & 4294967295) = 4294967295
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
