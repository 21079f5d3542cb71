-- Plants, in schema fl_trojans, an operator for every (operator, left type, right type) and a
-- function for every (pg_catalog function name, argument types) whose call pg_catalog resolves
-- only through an implicit cast: an object whose argument types match exactly is chosen
-- over pg_catalog's wherever fl_trojans is on the path. Each planted object does what
-- pg_catalog's would (so nothing it touches breaks) and counts itself in fl_trojans.hits (a
-- sequence: the count survives a rolled-back transaction) and, where the transaction
-- commits, logs the statement that ran it in fl_trojans.fired.
CREATE SCHEMA fl_trojans;
CREATE SEQUENCE fl_trojans.hits;
CREATE UNLOGGED TABLE fl_trojans.fired (what text, query text);
GRANT USAGE ON SCHEMA fl_trojans TO PUBLIC;
GRANT USAGE, UPDATE ON SEQUENCE fl_trojans.hits TO PUBLIC;
GRANT INSERT ON fl_trojans.fired TO PUBLIC;

-- `p_call` is pg_catalog's call with a `%s` for each argument.
CREATE FUNCTION fl_trojans.plant(
    p_name text, p_args text[], p_call text, p_kind text
) RETURNS integer
LANGUAGE plpgsql AS $plant$
DECLARE
    result regtype;
    params text := '';
    i int;
    n int := coalesce(pg_catalog.array_length(p_args, 1), 0);
    body text;
    fname text;
BEGIN
    -- What pg_catalog answers for these argument types (nothing: no trojan needed).
    BEGIN
        EXECUTE pg_catalog.format('SELECT pg_catalog.pg_typeof(%s)',
            pg_catalog.format(p_call, VARIADIC (SELECT pg_catalog.array_agg('NULL::' || a)
                                                  FROM pg_catalog.unnest(p_args) a)))
            INTO result;
    EXCEPTION WHEN OTHERS THEN
        RETURN 0;
    END;
    IF result::text IN ('record', 'unknown', '"any"', 'anyelement') THEN
        RETURN 0;
    END IF;
    FOR i IN 1 .. n LOOP
        params := params || CASE WHEN i > 1 THEN ', ' ELSE '' END || p_args[i];
    END LOOP;
    fname := 'trojan_' || pg_catalog.nextval('fl_trojans.names');
    body := pg_catalog.format(
        'BEGIN PERFORM pg_catalog.nextval(''fl_trojans.hits''); '
        || 'INSERT INTO fl_trojans.fired VALUES (%L, pg_catalog.current_query()); ',
        p_kind || ' ' || p_name || '(' || params || ')');
    -- The call again, on the function's own arguments.
    p_call := pg_catalog.format(p_call, VARIADIC (SELECT pg_catalog.array_agg('$' || g)
                                                    FROM pg_catalog.generate_series(1, n) g));
    IF result = 'void'::regtype THEN
        body := body || 'PERFORM ' || p_call || '; RETURN; END';
    ELSE
        body := body || 'RETURN ' || p_call || '; END';
    END IF;
    EXECUTE pg_catalog.format(
        'CREATE FUNCTION fl_trojans.%I(%s) RETURNS %s LANGUAGE plpgsql AS %L',
        CASE WHEN p_kind = 'function' THEN p_name ELSE fname END, params, result, body);
    IF p_kind = 'operator' THEN
        EXECUTE pg_catalog.format(
            'CREATE OPERATOR fl_trojans.%s (%s FUNCTION = fl_trojans.%I)',
            p_name,
            CASE WHEN n = 1 THEN pg_catalog.format('RIGHTARG = %s,', p_args[1])
                 ELSE pg_catalog.format('LEFTARG = %s, RIGHTARG = %s,', p_args[1], p_args[2]) END,
            fname);
    END IF;
    RETURN 1;
EXCEPTION WHEN duplicate_function THEN
    RETURN 0;
END
$plant$;
CREATE SEQUENCE fl_trojans.names;

DO $$
DECLARE
    types text[] := ARRAY['smallint', 'integer', 'bigint', 'numeric', 'double precision',
        'real', 'text', 'name', '"char"', 'character varying', 'bytea', 'boolean',
        'timestamp with time zone', 'timestamp without time zone', 'interval', 'oid', 'date',
        'jsonb'];
    few text[] := ARRAY['integer', 'bigint', 'numeric', 'text', 'name', 'boolean',
        'double precision', 'bytea'];
    ops text[] := ARRAY['+', '-', '*', '/', '%', '=', '<>', '<', '>', '<=', '>=', '||', '&',
        '|', '#', '<<', '>>', '@>', '<@', '&&', '~~', '^', '->', '->>', '?', '~'];
    names text[];
    op text; l text; r text; m text; fn text;
BEGIN
    FOREACH op IN ARRAY ops LOOP
        FOREACH l IN ARRAY types LOOP
            FOREACH r IN ARRAY types LOOP
                CONTINUE WHEN EXISTS (
                    SELECT 1 FROM pg_catalog.pg_operator o
                     WHERE o.oprname = op AND o.oprleft = l::regtype AND o.oprright = r::regtype
                       AND o.oprnamespace = 'pg_catalog'::regnamespace);
                PERFORM fl_trojans.plant(op, ARRAY[l, r],
                    pg_catalog.format('%%s OPERATOR(pg_catalog.%s) %%s', op),
                    'operator');
            END LOOP;
        END LOOP;
    END LOOP;
    FOREACH op IN ARRAY ARRAY['-', '~', '@', '|/'] LOOP
        FOREACH r IN ARRAY types LOOP
            CONTINUE WHEN EXISTS (
                SELECT 1 FROM pg_catalog.pg_operator o
                 WHERE o.oprname = op AND o.oprleft = 0 AND o.oprright = r::regtype
                   AND o.oprnamespace = 'pg_catalog'::regnamespace);
            PERFORM fl_trojans.plant(op, ARRAY[r],
                pg_catalog.format('OPERATOR(pg_catalog.%s) %%s', op), 'operator');
        END LOOP;
    END LOOP;
    -- Every plain (not aggregate, not set-returning) pg_catalog function of one to three
    -- arguments whose name fencelock's SQL could call.
    SELECT pg_catalog.array_agg(DISTINCT p.proname::text) INTO names
      FROM pg_catalog.pg_proc p
     WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.prokind = 'f'
       AND NOT p.proretset AND p.pronargs BETWEEN 1 AND 3
       AND p.proname IN ('clock_timestamp', 'set_config', 'format', 'quote_ident',
           'octet_length', 'starts_with', 'left', 'right', 'extract', 'date_part',
           'pg_notify', 'encode', 'decode', 'ceil', 'floor', 'substring', 'substr',
           'nextval', 'current_setting', 'quote_literal', 'pg_try_advisory_lock_shared',
           'pg_advisory_unlock_shared', 'to_jsonb', 'split_part', 'pg_try_advisory_lock',
           'cardinality', 'random', 'pg_terminate_backend', 'pg_advisory_xact_lock',
           'pg_advisory_unlock', 'pg_advisory_lock_shared', 'pg_advisory_lock', 'chr',
           'array_position', 'hashtext', 'hashtextextended', 'abs', 'length', 'lower',
           'upper', 'md5', 'sha256', 'to_hex', 'round', 'trunc', 'div', 'mod', 'power',
           'array_length', 'array_append', 'array_cat', 'concat', 'replace', 'strpos',
           'position', 'to_timestamp', 'make_interval', 'age', 'pg_backend_pid',
           'string_to_array', 'array_to_string', 'jsonb_build_object', 'int8send',
           'get_byte', 'set_byte', 'overlay', 'btrim', 'ltrim', 'rtrim', 'lpad', 'rpad',
           'pg_sleep', 'txid_current', 'pg_current_xact_id', 'timezone', 'date_trunc',
           'bit_length', 'char_length', 'convert_to', 'convert_from', 'uuid_send',
           'pg_try_advisory_xact_lock', 'pg_advisory_xact_lock_shared', 'num_nulls',
           'num_nonnulls', 'pg_typeof', 'greatest', 'least', 'coalesce', 'nullif',
           'int8', 'int4', 'float8', 'numeric', 'text', 'bool', 'bytea', 'to_char',
           'to_number', 'regexp_replace', 'regexp_match', 'pg_column_size', 'exp', 'ln',
           'log', 'sqrt', 'sign', 'width_bucket', 'gen_random_uuid', 'array_remove',
           'array_prepend', 'array_upper', 'array_lower', 'now', 'statement_timestamp',
           'transaction_timestamp', 'pg_xact_commit_timestamp', 'timeofday',
           'pg_walfile_name', 'pg_current_wal_lsn', 'pg_cancel_backend');
    FOREACH fn IN ARRAY names LOOP
        FOREACH l IN ARRAY types LOOP
            IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_proc p
                            WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.proname = fn
                              AND p.proargtypes::oid[] = ARRAY[l::regtype::oid]) THEN
                PERFORM fl_trojans.plant(fn, ARRAY[l],
                    pg_catalog.format('pg_catalog.%I(%%s)', fn), 'function');
            END IF;
            FOREACH r IN ARRAY types LOOP
                IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_proc p
                                WHERE p.pronamespace = 'pg_catalog'::regnamespace
                                  AND p.proname = fn
                                  AND p.proargtypes::oid[] = ARRAY[l::regtype::oid, r::regtype::oid]) THEN
                    PERFORM fl_trojans.plant(fn, ARRAY[l, r],
                        pg_catalog.format('pg_catalog.%I(%%s, %%s)', fn),
                        'function');
                END IF;
            END LOOP;
        END LOOP;
        FOREACH l IN ARRAY few LOOP
            FOREACH r IN ARRAY few LOOP
                FOREACH m IN ARRAY few LOOP
                    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_proc p
                                    WHERE p.pronamespace = 'pg_catalog'::regnamespace
                                      AND p.proname = fn
                                      AND p.proargtypes::oid[]
                                          = ARRAY[l::regtype::oid, m::regtype::oid, r::regtype::oid]) THEN
                        PERFORM fl_trojans.plant(fn, ARRAY[l, m, r],
                            pg_catalog.format('pg_catalog.%I(%%s, %%s, %%s)', fn),
                            'function');
                    END IF;
                END LOOP;
            END LOOP;
        END LOOP;
    END LOOP;
END
$$;
