-- fencelock schema, version 4: tokens without a WAL flush per grant (DESIGN section 5.3,
-- "Tokens: a durable epoch over volatile counters").
--
-- A token is epoch * 2^32 + counter. The epoch is durable (a logged table, bumped only with a
-- synchronous commit); the per-key counters, the leases and the advisory holders are UNLOGGED,
-- so a grant writes no WAL and its commit waits for no flush. Crash recovery empties unlogged
-- tables (so does the promotion of a standby, and a restore from a physical backup); the live
-- marker goes with them, and the next grant then starts a greater epoch before it hands out a
-- token, so every token after the loss is above every token before it.
-- Applied like the earlier versions, with search_path set to fencelock's schema.

-- The durable epoch: one row, the greatest epoch ever started (NULL: none yet). A fresh
-- installation starts at epoch 0, so its tokens are 1, 2, 3... until the first loss. Tokens
-- handed out before this version (logged counters) stay below every new token: the epoch
-- counts as started at the high half of the largest of them, and the first new one is above.
CREATE TABLE fencelock_epoch (
    one   boolean PRIMARY KEY DEFAULT true CHECK (one),
    epoch bigint  CHECK (epoch BETWEEN 0 AND 2147483647)
);
INSERT INTO fencelock_epoch (epoch)
SELECT max(last_token) >> 32 FROM fencelock_counters;

-- The epoch the volatile state belongs to: one row, written only by fencelock_new_epoch in
-- the transaction that made that epoch durable. No row means the volatile state was lost (or
-- never started): grants then ask for a new epoch first.
CREATE UNLOGGED TABLE fencelock_epoch_live (
    one   boolean PRIMARY KEY DEFAULT true CHECK (one),
    epoch bigint  NOT NULL
);

-- Per-key counters hold the key's last token (epoch * 2^32 + counter): a grant at live epoch E
-- gives last_token + 1 when the row is already at epoch E or later (and its counter below
-- 2^32 - 1), else E * 2^32 + 1.
ALTER TABLE fencelock_counters SET UNLOGGED;
ALTER TABLE fencelock_leases SET UNLOGGED;
ALTER TABLE fencelock_advisory_holders SET UNLOGGED;

-- Starts a new epoch when the volatile state was lost (no live marker), or when the caller
-- saw epoch `p_seen` run out of counters for a key (the marker still equals `p_seen`), or
-- when the marker is below `p_at_least` (advance_token). Otherwise another caller already
-- did it, and nothing changes. Returns the live epoch afterwards.
-- The row lock on fencelock_epoch serialises callers; the commit is synchronous whatever the
-- database's default, so no grant can see the new marker before the new epoch is on disk.
CREATE FUNCTION fencelock_new_epoch(p_seen bigint, p_at_least bigint DEFAULT 0)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    durable bigint;
    live    bigint;
BEGIN
    PERFORM 1 FROM fencelock_epoch e WHERE e.one FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'fencelock: the epoch row is missing' USING ERRCODE = 'P0002';
    END IF;
    SELECT e.epoch INTO durable FROM fencelock_epoch e WHERE e.one;
    SELECT l.epoch INTO live FROM fencelock_epoch_live l WHERE l.one;
    IF live IS NOT NULL AND live IS DISTINCT FROM p_seen AND live >= p_at_least THEN
        RETURN live;
    END IF;
    -- After a loss the marker is gone and tokens of epoch `durable` may have been handed out:
    -- the new epoch is above it. Otherwise the marker equals `durable`.
    durable := GREATEST(COALESCE(durable, -1) + 1, p_at_least);
    PERFORM set_config('synchronous_commit', 'on', true);
    UPDATE fencelock_epoch SET epoch = durable WHERE one;
    INSERT INTO fencelock_epoch_live AS l (one, epoch) VALUES (true, durable)
    ON CONFLICT (one) DO UPDATE SET epoch = EXCLUDED.epoch;
    RETURN durable;
END
$$;

-- advance_token: raises the key's counter so that its next grant is above `p_floor`. A floor
-- in the live epoch only raises the (volatile) counter: losing it starts a greater epoch
-- anyway. A floor in a later epoch first makes that epoch durable and live.
CREATE FUNCTION fencelock_advance_token(p_key text, p_floor bigint)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    live  bigint;
    token bigint;
BEGIN
    SELECT l.epoch INTO live FROM fencelock_epoch_live l WHERE l.one;
    IF live IS NULL OR live < (p_floor >> 32) THEN
        live := fencelock_new_epoch(live, p_floor >> 32);
    END IF;
    INSERT INTO fencelock_counters AS c (key, last_token)
    VALUES (p_key, GREATEST(p_floor, live << 32))
    ON CONFLICT (key) DO UPDATE SET last_token = GREATEST(c.last_token, EXCLUDED.last_token)
    RETURNING c.last_token INTO token;
    RETURN token;
END
$$;
