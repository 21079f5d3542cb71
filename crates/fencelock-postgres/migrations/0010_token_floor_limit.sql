-- fencelock schema, version 10: a token floor may not use up the schema's epochs (DESIGN
-- section 5.3, "Tokens: a durable epoch over volatile counters").
-- Applied like the earlier versions, with search_path set to fencelock's schema.
--
-- Epochs are shared by every key of a schema: a floor in epoch E makes E the live epoch of
-- every key, and each later loss of the volatile state (a crash, a failover, a restore)
-- starts the next one. Until this version any floor below 2^63 was taken: a floor in epoch
-- 2^31 - 1 (fencelock_epoch's CHECK allows no greater) left none for the next crash, after
-- which fencelock_new_epoch failed its CHECK on every grant of every key, and no floor could
-- repair it. A floor is now refused past epoch 2^31 - 1 - 2^16, keeping 2^16 epochs for the
-- losses and used-up counters to come (the client refuses it first, with the same limit).
CREATE OR REPLACE FUNCTION fencelock_advance_token(p_key text, p_floor bigint)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    live  bigint;
    token bigint;
BEGIN
    IF (p_floor >> 32) > 2147483647 - 65536 THEN
        RAISE EXCEPTION 'fencelock: token floor % is in epoch %, beyond epoch %, the last a floor may reach',
            p_floor, p_floor >> 32, 2147483647 - 65536
            USING ERRCODE = 'FL006',
                  HINT = 'Epochs are shared by every key of the schema; the last 2^16 are kept '
                      || 'for the new epochs started after a crash or failover or when a key''s '
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
