-- fencelock schema, version 3: the row guard's condition is the rule itself, not a call.
--
-- A trigger's WHEN condition is prepared again for every statement that fires it, and
-- inlining a SQL function there means parsing its body each time: measured, about 20 us per
-- guarded UPDATE. So the rule of DESIGN section 2 is now written once, as a template of SQL
-- text (fencelock_rule_sql); fencelock_admits is generated from it, and fencelock_guard_table
-- writes it straight into the trigger's WHEN condition. Guards installed by version 2 keep
-- working (they call fencelock_admits); installing a guard again upgrades it.
-- Applied like the earlier versions, with search_path set to fencelock's schema.

-- The fence rule (fencelock_core::FenceRule::admits) over five SQL expressions: a presented
-- fence (token, owner) is admitted after (last_token, last_owner) iff its token is newer, or,
-- unless strict, the same token from the same owner. Nothing recorded yet (last_token NULL)
-- admits any valid fence; a missing or invalid presented fence (NULL, token below 1) never is.
CREATE FUNCTION fencelock_rule_sql(
    last_token text,
    last_owner text,
    token      text,
    owner      text,
    strict     text
) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT format(
        'coalesce(%3$s > 0 AND %4$s IS NOT NULL AND (%1$s IS NULL OR %3$s > %1$s '
        || 'OR (NOT %5$s AND %3$s = %1$s AND %4$s = %2$s)), false)',
        last_token, last_owner, token, owner, strict)
$$;

DO $$
BEGIN
    EXECUTE format(
        'CREATE OR REPLACE FUNCTION fencelock_admits('
        || 'last_token bigint, last_owner bytea, token bigint, owner bytea, strict boolean) '
        || 'RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS %L',
        'SELECT ' || fencelock_rule_sql('last_token', 'last_owner', 'token', 'owner', 'strict'));
END
$$;

CREATE OR REPLACE FUNCTION fencelock_guard_table(
    p_table        regclass,
    p_token_column name    DEFAULT 'fence_token',
    p_owner_column name    DEFAULT 'fence_owner',
    p_strict       boolean DEFAULT false
) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    here       text := quote_ident(current_schema());
    kind       "char";
    token_type regtype;
    owner_type regtype;
BEGIN
    SELECT c.relkind INTO kind FROM pg_class c WHERE c.oid = p_table;
    IF kind IS NULL OR kind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION 'fencelock: % is not a table', p_table USING ERRCODE = '42809';
    END IF;
    IF p_token_column IS NULL OR p_owner_column IS NULL OR p_token_column = p_owner_column THEN
        RAISE EXCEPTION 'fencelock: the fence needs two distinct columns, token and owner'
              USING ERRCODE = '22023';
    END IF;
    SELECT a.atttypid::regtype INTO token_type FROM pg_attribute a
     WHERE a.attrelid = p_table AND a.attname = p_token_column
       AND a.attnum > 0 AND NOT a.attisdropped;
    SELECT a.atttypid::regtype INTO owner_type FROM pg_attribute a
     WHERE a.attrelid = p_table AND a.attname = p_owner_column
       AND a.attnum > 0 AND NOT a.attisdropped;
    IF token_type IS NULL OR owner_type IS NULL THEN
        RAISE EXCEPTION 'fencelock: table % has no column %: add the fence columns first '
                        '(ALTER TABLE % ADD COLUMN % bigint, ADD COLUMN % bytea)',
                        p_table,
                        quote_ident(CASE WHEN token_type IS NULL THEN p_token_column
                                         ELSE p_owner_column END),
                        p_table, quote_ident(p_token_column), quote_ident(p_owner_column)
              USING ERRCODE = '42703';
    END IF;
    IF token_type <> 'bigint'::regtype OR owner_type <> 'bytea'::regtype THEN
        RAISE EXCEPTION 'fencelock: the fence columns of % must be % bigint and % bytea, '
                        'not % and %', p_table, quote_ident(p_token_column),
                        quote_ident(p_owner_column), token_type, owner_type
              USING ERRCODE = '42804';
    END IF;
    EXECUTE format('DROP TRIGGER IF EXISTS fencelock_guard_update ON %s', p_table);
    EXECUTE format('DROP TRIGGER IF EXISTS fencelock_guard_delete ON %s', p_table);
    EXECUTE format(
        'CREATE TRIGGER fencelock_guard_update BEFORE UPDATE ON %s FOR EACH ROW '
        || 'WHEN (NOT %s) EXECUTE FUNCTION %s.fencelock_guard_refuse(%L, %L)',
        p_table,
        fencelock_rule_sql(
            format('OLD.%I', p_token_column), format('OLD.%I', p_owner_column),
            format('NEW.%I', p_token_column), format('NEW.%I', p_owner_column),
            quote_literal(p_strict) || '::boolean'),
        here, p_token_column, p_owner_column);
    EXECUTE format(
        'CREATE TRIGGER fencelock_guard_delete BEFORE DELETE ON %1$s FOR EACH ROW '
        || 'EXECUTE FUNCTION %2$s.fencelock_guard_delete(%3$L, %4$L, %5$L)',
        p_table, here, p_token_column, p_owner_column, p_strict);
END
$$;
