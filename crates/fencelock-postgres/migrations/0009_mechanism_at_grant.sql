-- fencelock schema, version 9: the schema's lock mechanism is checked by every grant, in the
-- grant's own statement (DESIGN section 5.3, "One lock space per key in a schema").
-- Applied like the earlier versions, with search_path set to fencelock's schema.
--
-- Until version 8 a client read (or recorded) the mechanism once and remembered it: after the
-- row was deleted and another mechanism bound the schema, a client that remembered the old one
-- kept granting with it, and two holders of one key (one of each kind) did not see each
-- other. Every grant statement now calls this function first and grants only when it returns
-- the grant's own mechanism.

-- The schema's lock mechanism, recording `p_mechanism` ('lease' or 'advisory') when none is
-- recorded. PL/pgSQL, so its second look takes a fresh snapshot: when another grant recorded
-- a mechanism concurrently (this INSERT waited for it, then did nothing), that look sees it.
-- It reads one row of a one-row table by its key; only the first grant of a schema writes.
-- The body names the table schema-qualified (written in by format, as versions 3 and 8 do)
-- and the function has no SET clause, whose save and restore of settings every grant would
-- pay for.
DO $$
BEGIN
    EXECUTE format(
        'CREATE FUNCTION fencelock_bind_mechanism(p_mechanism text) RETURNS text '
        || 'LANGUAGE plpgsql VOLATILE AS %L',
        format($body$
DECLARE
    bound text;
BEGIN
    SELECT m.mechanism INTO bound FROM %1$I.fencelock_mechanism m WHERE m.one;
    IF FOUND THEN
        RETURN bound;
    END IF;
    INSERT INTO %1$I.fencelock_mechanism (mechanism) VALUES (p_mechanism)
    ON CONFLICT (one) DO NOTHING;
    SELECT m.mechanism INTO bound FROM %1$I.fencelock_mechanism m WHERE m.one;
    RETURN bound;
END
$body$, current_schema()));
END
$$;
