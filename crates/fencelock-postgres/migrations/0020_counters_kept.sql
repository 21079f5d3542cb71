-- fencelock schema, version 20: a token counter row is never deleted by mistake (DESIGN 5.3,
-- "Tokens", the paragraph on what an operator must never delete). Applied like the earlier
-- versions, with search_path set to fencelock's schema.
--
-- A key's counter row is what makes its next token greater than every token it was granted
-- before: deleted while its epoch is live, the key's next grant started again at the epoch's
-- first token, and a holder of an earlier, greater token was then admitted over the new one
-- (found by an audit: a DELETE, then token 1 again). Deleting rows of fencelock_counters (or
-- emptying the table) is now refused, naming the heal, unless the deleting transaction says
-- it removes keys nobody will lock again (`fencelock.forget_counters` set to `on` for that
-- transaction), as the benchmark's cleanup of a finished run does. A crash, a promotion or a
-- restore still empties the UNLOGGED table as before, and the durable epoch covers that.
CREATE FUNCTION fencelock_counters_kept() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF current_setting('fencelock.forget_counters', true) IS DISTINCT FROM 'on' THEN
        RAISE EXCEPTION 'fencelock: token counters are never deleted: a key whose counter is '
                        'gone would be granted tokens it was granted before'
              USING ERRCODE = '55000',
                    HINT = 'to retire keys nobody will lock again, delete them in a transaction '
                           'that runs SELECT set_config(''fencelock.forget_counters'', ''on'', true) '
                           'first; to move a key past old tokens, use fencelock_advance_token';
    END IF;
    IF TG_LEVEL = 'ROW' THEN
        RETURN OLD;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER fencelock_counters_kept
    BEFORE DELETE ON fencelock_counters
    FOR EACH ROW EXECUTE FUNCTION fencelock_counters_kept();
CREATE TRIGGER fencelock_counters_kept_whole
    BEFORE TRUNCATE ON fencelock_counters
    FOR EACH STATEMENT EXECUTE FUNCTION fencelock_counters_kept();
