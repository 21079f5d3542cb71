-- fencelock schema, version 2: fence the application's own tables.
--
-- Applied like version 1, with search_path set to fencelock's schema (then pg_temp) for the
-- migration's transaction only. Every function below that touches a table keeps that
-- search_path (`SET search_path FROM CURRENT`), so it finds fencelock's tables whatever the
-- caller's search_path is: callers name fencelock's functions schema-qualified and keep their
-- own search_path for their own tables.
--
-- Refusals raise SQLSTATE FL001 (a stale fence) and FL002 (no valid fence presented), class
-- FL being fencelock's own; the error aborts the caller's transaction, so the caller's own
-- statements roll back with the refused one. FL001's DETAIL is machine-readable:
--   presented fence <token>/<owner hex>, current fence <token>/<owner hex>, resource <name>

-- The fence rule of DESIGN section 2 (fencelock_core::FenceRule::admits) as one expression:
-- a presented fence (token, owner) is admitted after (last_token, last_owner) iff its token is
-- newer, or, under the monotonic rule (strict = false), the same token from the same owner.
-- Nothing recorded yet (last_token NULL) admits any valid fence; a missing or invalid presented
-- fence (NULL, token below 1) is never admitted. A plain SQL expression, so the planner inlines
-- it: the row guard's trigger condition calls no function for an admitted UPDATE.
CREATE FUNCTION fencelock_admits(
    last_token bigint,
    last_owner bytea,
    token      bigint,
    owner      bytea,
    strict     boolean
) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(
        token > 0 AND owner IS NOT NULL
        AND (last_token IS NULL
             OR token > last_token
             OR (NOT strict AND token = last_token AND owner = last_owner)),
        false)
$$;

-- PgStorage's operation, unchanged but for two things: the rule is the expression above, and
-- the function keeps fencelock's search_path, so callers no longer need it.
CREATE OR REPLACE FUNCTION fencelock_storage_apply(
    p_resource text,
    p_token    bigint,
    p_owner    bytea,
    p_strict   boolean,
    p_write    boolean,
    p_value    bytea
) RETURNS TABLE (admitted boolean, cur_token bigint, cur_owner bytea, cur_value bytea)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    last_token bigint;
    last_owner bytea;
    last_value bytea;
BEGIN
    LOOP
        SELECT s.token, s.owner, s.value
          INTO last_token, last_owner, last_value
          FROM fencelock_storage s
         WHERE s.resource = p_resource
           FOR UPDATE;
        IF NOT FOUND THEN
            INSERT INTO fencelock_storage AS s (resource, value, token, owner)
            VALUES (p_resource, CASE WHEN p_write THEN p_value END, p_token, p_owner)
            ON CONFLICT (resource) DO NOTHING;
            IF FOUND THEN
                RETURN QUERY SELECT true, p_token, p_owner, NULL::bytea;
                RETURN;
            END IF;
            -- A concurrent first operation created the row: decide against it.
            CONTINUE;
        END IF;
        IF fencelock_admits(last_token, last_owner, p_token, p_owner, p_strict) THEN
            UPDATE fencelock_storage s
               SET token = p_token,
                   owner = p_owner,
                   value = CASE WHEN p_write THEN p_value ELSE s.value END
             WHERE s.resource = p_resource;
            RETURN QUERY SELECT true, p_token, p_owner,
                                CASE WHEN p_write THEN NULL::bytea ELSE last_value END;
        ELSE
            RETURN QUERY SELECT false, last_token, last_owner, NULL::bytea;
        END IF;
        RETURN;
    END LOOP;
END
$$;

-- fencelock_admit: the last admitted fence of each resource of the application's own data.
CREATE TABLE fencelock_fences (
    resource text   PRIMARY KEY,
    token    bigint NOT NULL CHECK (token > 0),
    owner    bytea  NOT NULL CHECK (octet_length(owner) = 16)
);

-- Raises 22023 unless (p_token, p_owner) is a fence as fencelock hands them out.
CREATE FUNCTION fencelock_check_fence(p_token bigint, p_owner bytea) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_token IS NULL OR p_token < 1 THEN
        RAISE EXCEPTION 'fencelock: % is not a fencing token (tokens are 1 or more)',
                        coalesce(p_token::text, 'NULL')
              USING ERRCODE = '22023';
    END IF;
    IF p_owner IS NULL OR octet_length(p_owner) <> 16 THEN
        RAISE EXCEPTION 'fencelock: a fence owner is 16 bytes, got %',
                        coalesce(octet_length(p_owner) || ' bytes', 'NULL')
              USING ERRCODE = '22023';
    END IF;
END
$$;

-- Raises FL001 for a refused fence, naming both fences and the resource.
CREATE FUNCTION fencelock_raise_stale(
    p_resource text,
    p_token    bigint,
    p_owner    bytea,
    cur_token  bigint,
    cur_owner  bytea
) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'fencelock: stale fence for %: presented token %, current token %',
                    p_resource, p_token, cur_token
          USING ERRCODE = 'FL001',
                DETAIL = format('presented fence %s/%s, current fence %s/%s, resource %s',
                                p_token, encode(p_owner, 'hex'),
                                cur_token, encode(cur_owner, 'hex'), p_resource),
                HINT = 'A newer lock holder was admitted; this holder''s transaction rolls back.';
END
$$;

-- Admits (p_token, p_owner) for p_resource by the rule above and records it, inside the
-- caller's transaction. The fence record's row stays locked until that transaction ends, so
-- concurrent admits of one resource are serialised, and the recorded fence commits or rolls
-- back with the caller's own writes. A refusal raises FL001 and changes nothing; the same
-- fence admitted again writes nothing.
CREATE FUNCTION fencelock_admit(
    p_resource text,
    p_token    bigint,
    p_owner    bytea,
    p_strict   boolean DEFAULT false
) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    cur_token bigint;
    cur_owner bytea;
BEGIN
    IF p_resource IS NULL OR p_resource = '' OR octet_length(p_resource) > 512
       OR p_resource ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'fencelock: invalid resource name %: use 1 to 512 bytes without '
                        'control characters', coalesce(quote_literal(left(p_resource, 64)), 'NULL')
              USING ERRCODE = '22023';
    END IF;
    PERFORM fencelock_check_fence(p_token, p_owner);
    -- ON CONFLICT locks the existing row even when its WHERE is false.
    INSERT INTO fencelock_fences AS f (resource, token, owner)
    VALUES (p_resource, p_token, p_owner)
    ON CONFLICT (resource) DO UPDATE
        SET token = EXCLUDED.token,
            owner = EXCLUDED.owner
        WHERE (f.token, f.owner) IS DISTINCT FROM (EXCLUDED.token, EXCLUDED.owner)
          AND fencelock_admits(f.token, f.owner, EXCLUDED.token, EXCLUDED.owner, p_strict);
    IF FOUND THEN
        RETURN;
    END IF;
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

-- Presents (p_token, p_owner) for the rest of the caller's transaction: the fence a DELETE of
-- a guarded row is checked against (a DELETE has no new row to carry one).
CREATE FUNCTION fencelock_present(p_token bigint, p_owner bytea) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM fencelock_check_fence(p_token, p_owner);
    PERFORM set_config('fencelock.fence', p_token || '/' || encode(p_owner, 'hex'), true);
END
$$;

-- How a refusal names a guarded row: the table and its primary key, `public.accounts (id=10)`.
CREATE FUNCTION fencelock_row_name(p_table regclass, p_row jsonb) RETURNS text
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT p_table::text || coalesce(' (' || (
        SELECT string_agg(quote_ident(a.attname) || '=' || coalesce(p_row ->> a.attname::text, 'NULL'),
                          ', ' ORDER BY k.ord)
          FROM pg_index i
         CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
          JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
         WHERE i.indrelid = p_table AND i.indisprimary
    ) || ')', '')
$$;

-- The row guard's UPDATE refusal. The trigger calls it only when its WHEN condition found the
-- new row's fence not admitted after the old row's. TG_ARGV: token column, owner column.
CREATE FUNCTION fencelock_guard_refuse() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    columns   text := format('SELECT ($1).%I, ($1).%I', TG_ARGV[0], TG_ARGV[1]);
    p_token   bigint;
    p_owner   bytea;
    cur_token bigint;
    cur_owner bytea;
BEGIN
    EXECUTE columns INTO p_token, p_owner USING NEW;
    EXECUTE columns INTO cur_token, cur_owner USING OLD;
    IF p_token IS NULL OR p_token < 1 OR p_owner IS NULL OR octet_length(p_owner) <> 16 THEN
        RAISE EXCEPTION 'fencelock: an UPDATE of guarded table % must leave a fence in (%, %): '
                        'token %, owner of % bytes', TG_RELID::regclass,
                        quote_ident(TG_ARGV[0]), quote_ident(TG_ARGV[1]),
                        coalesce(p_token::text, 'NULL'), coalesce(octet_length(p_owner)::text, 'NULL')
              USING ERRCODE = 'FL002';
    END IF;
    PERFORM fencelock_raise_stale(fencelock_row_name(TG_RELID, to_jsonb(OLD)),
                                  p_token, p_owner, cur_token, cur_owner);
    RETURN NULL;
END
$$;

-- The row guard's DELETE check: the fence presented with fencelock_present in this
-- transaction must be admitted after the row's. TG_ARGV: token column, owner column, strict.
CREATE FUNCTION fencelock_guard_delete() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    presented text := nullif(current_setting('fencelock.fence', true), '');
    p_token   bigint;
    p_owner   bytea;
    cur_token bigint;
    cur_owner bytea;
BEGIN
    IF presented IS NULL THEN
        RAISE EXCEPTION 'fencelock: a DELETE from guarded table % needs a fence: call '
                        '%.fencelock_present(token, owner) earlier in the same transaction',
                        TG_RELID::regclass, quote_ident(current_schema())
              USING ERRCODE = 'FL002';
    END IF;
    p_token := split_part(presented, '/', 1)::bigint;
    p_owner := decode(split_part(presented, '/', 2), 'hex');
    EXECUTE format('SELECT ($1).%I, ($1).%I', TG_ARGV[0], TG_ARGV[1])
       INTO cur_token, cur_owner USING OLD;
    IF NOT fencelock_admits(cur_token, cur_owner, p_token, p_owner, TG_ARGV[2]::boolean) THEN
        PERFORM fencelock_raise_stale(fencelock_row_name(TG_RELID, to_jsonb(OLD)),
                                      p_token, p_owner, cur_token, cur_owner);
    END IF;
    RETURN OLD;
END
$$;

-- Installs (or replaces) the row guard on p_table: every UPDATE must leave on the row a fence
-- (p_token_column bigint, p_owner_column bytea) that the rule admits after the row's current
-- one, and every DELETE must present such a fence with fencelock_present. Both are checked on
-- the newest committed version of the row, under its row lock. A table without those columns
-- is refused (42703, 42804) and nothing changes.
CREATE FUNCTION fencelock_guard_table(
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
        'CREATE TRIGGER fencelock_guard_update BEFORE UPDATE ON %1$s FOR EACH ROW '
        || 'WHEN (NOT %2$s.fencelock_admits(OLD.%3$I, OLD.%4$I, NEW.%3$I, NEW.%4$I, %5$L)) '
        || 'EXECUTE FUNCTION %2$s.fencelock_guard_refuse(%3$L, %4$L)',
        p_table, here, p_token_column, p_owner_column, p_strict);
    EXECUTE format(
        'CREATE TRIGGER fencelock_guard_delete BEFORE DELETE ON %1$s FOR EACH ROW '
        || 'EXECUTE FUNCTION %2$s.fencelock_guard_delete(%3$L, %4$L, %5$L)',
        p_table, here, p_token_column, p_owner_column, p_strict);
END
$$;

-- Removes the row guard from p_table (nothing happens if it has none).
CREATE FUNCTION fencelock_unguard_table(p_table regclass) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    EXECUTE format('DROP TRIGGER IF EXISTS fencelock_guard_update ON %s', p_table);
    EXECUTE format('DROP TRIGGER IF EXISTS fencelock_guard_delete ON %s', p_table);
END
$$;
