-- fencelock schema, version 17: every function resolves names on one pinned path, fencelock's
-- schema, then pg_catalog, then pg_temp (DESIGN section 8, "Security model"). Applied like
-- the earlier versions, with search_path set to fencelock's schema.
--
-- Most functions already kept the migrator's path; the SQL functions and the release trigger
-- of version 1 kept none, and resolved operators and functions on the caller's path. A role
-- able to create in a schema on that path (any role in `public` before PostgreSQL 15) could
-- plant an operator whose argument types match exactly where pg_catalog's needs an implicit
-- cast (`unknown || name` in the release trigger), and the planted operator ran as whoever
-- called the function: a superuser's release ran it as superuser. With the path pinned, a
-- function finds only fencelock's objects and pg_catalog's, and fencelock refuses at connect
-- a schema in which a role other than its owner (or a superuser) can create or owns anything
-- (sql/schema_trust.sql): nothing on the path is an untrusted role's. The schema stays first,
-- since function bodies name its tables unqualified and read it as current_schema().
--
-- A function added by a later version pins the same path (a test checks every function of a
-- migrated schema).
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure
          FROM pg_catalog.pg_proc p
          JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
         WHERE n.nspname OPERATOR(pg_catalog.=) pg_catalog.current_schema()
    LOOP
        EXECUTE pg_catalog.format(
            'ALTER FUNCTION %s SET search_path = %I, pg_catalog, pg_temp',
            f, pg_catalog.current_schema());
    END LOOP;
END
$$;
