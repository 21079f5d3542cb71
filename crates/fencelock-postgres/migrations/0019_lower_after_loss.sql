-- fencelock schema, version 19: lowering a fence after the volatile state was lost never
-- admits a granted token again (DESIGN 5.3, "Lowering a fence").
--
-- fencelock_lower_fence refused a token below the one the key's counter had granted; but the
-- counters live in an UNLOGGED table, which a crash, a promotion or a restore empties: with
-- no counter row the check let a fence be lowered below tokens that had been granted and
-- admitted, and a superseded holder's write then landed after a newer one. Without the row
-- the bound is now what the epochs say: every token of every epoch before the live one may
-- have been granted, and, when no epoch is live (the state was lost and no grant has started
-- the next), every token of the durable epoch too; with no durable epoch, none ever started
-- and nothing was granted here. The next grant's token is above the bound
-- either way (a grant in the live epoch, or the first of the next epoch), so a key is never
-- left unusable.
CREATE OR REPLACE FUNCTION fencelock_lower_fence(p_resource text, p_token bigint)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    was     bigint;
    granted bigint;
    live    bigint;
    durable bigint;
    bound   text;
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
    IF granted IS NOT NULL THEN
        bound := format('this schema''s counter has granted up to token %s', granted);
    ELSE
        SELECT e.epoch INTO live FROM fencelock_epoch_live e WHERE e.one;
        IF live IS NOT NULL THEN
            granted := (live << 32) - 1;
            bound := format('the key has no counter in the live epoch %s, and every token of '
                            'the epochs before it, up to %s, may have been granted', live, granted);
        ELSE
            SELECT e.epoch INTO durable FROM fencelock_epoch e WHERE e.one;
            -- No durable epoch: no epoch ever started here, so no token was ever granted
            -- (the tokens fenced so far are another service's).
            granted := CASE WHEN durable IS NULL THEN 0 ELSE ((durable + 1) << 32) - 1 END;
            bound := format('the counters were lost (a crash, a promotion or a restore empties '
                            'them), and every token up to the end of epoch %s, %s, may have '
                            'been granted', durable, granted);
        END IF;
    END IF;
    IF p_token < granted THEN
        RAISE EXCEPTION 'fencelock: cannot lower the fence of % to token %: %, and its '
                        'holders would be admitted again', p_resource, p_token, bound
              USING ERRCODE = '22023',
                    HINT = format('Lower it to %s or above.', granted);
    END IF;
    UPDATE fencelock_fences f
       SET token = p_token, owner = '\x00000000000000000000000000000000'::bytea
     WHERE f.resource = p_resource;
    RETURN was;
END
$$;
