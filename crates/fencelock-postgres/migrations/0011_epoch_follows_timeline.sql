-- fencelock schema, version 11: epochs follow the server's timeline, so that a promoted
-- standby's tokens are above every token its old primary handed out, whatever replication
-- did or did not carry (DESIGN section 5.3, "Tokens: a durable epoch over volatile counters").
-- Applied like the earlier versions, with search_path set to fencelock's schema.
--
-- Until version 10 a new epoch was the durable one plus one. With a synchronous standby whose
-- wait an operator cancelled (the commit stays, locally), or with asynchronous replication,
-- the standby may lack the last bumps: promoted, it started an epoch its old primary had
-- already used, and handed out the same tokens again. Every promotion (and every recovery to
-- a point in time) starts a higher timeline, and a server knows its timeline: timeline T
-- (1, 2, ...) now owns the epochs (T - 1) * 2^20 to T * 2^20 - 1, and a new epoch is at least
-- the first of its server's timeline. A primary on timeline T never starts an epoch past its
-- timeline's last (it refuses instead), so every epoch it started is below every epoch of a
-- later timeline. On timeline 1 nothing changes: its epochs are 0 to 2^20 - 1.

-- The server's timeline: the one its WAL is being written on (the first eight hex digits of
-- the current WAL file's name). Fails on a standby, where nothing is granted anyway.
CREATE FUNCTION fencelock_timeline() RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint
$$;

-- The last epoch a token floor may be in on timeline `p_timeline`: its timeline's last but
-- 2^16, kept for the new epochs the schema starts on its own there.
CREATE FUNCTION fencelock_max_floor_epoch(p_timeline bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT LEAST(p_timeline * 1048576, 2147483648) - 1 - 65536
$$;

-- As version 4's, but a new epoch is at least its timeline's first, and never past its last.
CREATE OR REPLACE FUNCTION fencelock_new_epoch(p_seen bigint, p_at_least bigint DEFAULT 0)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    durable  bigint;
    live     bigint;
    timeline bigint := fencelock_timeline();
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
    IF timeline > 2048 THEN
        RAISE EXCEPTION 'fencelock: the server is on timeline %, past 2048, the last whose epochs a token can hold',
            timeline
            USING ERRCODE = 'FL007';
    END IF;
    -- After a loss the marker is gone and tokens of epoch `durable` may have been handed out:
    -- the new epoch is above it, and at least the first of this timeline's.
    durable := GREATEST(COALESCE(durable, -1) + 1, p_at_least, (timeline - 1) * 1048576);
    IF durable >= timeline * 1048576 THEN
        RAISE EXCEPTION 'fencelock: no epoch is left on timeline % (its last is %, the next would be %)',
            timeline, timeline * 1048576 - 1, durable
            USING ERRCODE = 'FL007',
                  HINT = 'A new epoch past its timeline''s last could be used again by a '
                      || 'promoted standby. A promotion or a recovery to a point in time '
                      || 'starts the next timeline.';
    END IF;
    PERFORM set_config('synchronous_commit', 'on', true);
    UPDATE fencelock_epoch SET epoch = durable WHERE one;
    INSERT INTO fencelock_epoch_live AS l (one, epoch) VALUES (true, durable)
    ON CONFLICT (one) DO UPDATE SET epoch = EXCLUDED.epoch;
    RETURN durable;
END
$$;

-- As version 10's, but the last epoch a floor may reach is its timeline's (less the 2^16
-- kept), so that no floor puts an epoch where a later timeline's would be.
CREATE OR REPLACE FUNCTION fencelock_advance_token(p_key text, p_floor bigint)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    live     bigint;
    token    bigint;
    timeline bigint := fencelock_timeline();
BEGIN
    IF (p_floor >> 32) > fencelock_max_floor_epoch(timeline) THEN
        RAISE EXCEPTION 'fencelock: token floor % is in epoch %, beyond epoch %, the last a floor may reach on timeline %',
            p_floor, p_floor >> 32, fencelock_max_floor_epoch(timeline), timeline
            USING ERRCODE = 'FL006',
                  HINT = 'Epochs are shared by every key of the schema, and timeline T owns '
                      || 'epochs (T - 1) * 2^20 to T * 2^20 - 1; the last 2^16 of them are '
                      || 'kept for the new epochs started after a crash or when a key''s '
                      || 'counter is used up.';
    END IF;
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
