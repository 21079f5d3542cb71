-- $1 schema. The first thing in fencelock's schema that a role other than the schema's owner
-- (or a superuser) controls, described for an error message, or no row. Such a role could
-- plant an operator or function on the path fencelock's functions pin (migration 17), or
-- replace a table the fence rests on. Every name is qualified with pg_catalog, and every
-- operator is pg_catalog's, so the check runs the same on any caller's search_path.
WITH n AS (
    SELECT s.oid, s.nspowner, s.nspacl
      FROM pg_catalog.pg_namespace s
     WHERE s.nspname OPERATOR(pg_catalog.=) $1::pg_catalog.text
),
trusted AS (
    SELECT r.oid FROM pg_catalog.pg_roles r, n
     WHERE r.oid OPERATOR(pg_catalog.=) n.nspowner OR r.rolsuper
)
SELECT what FROM (
    SELECT 1 AS rank, pg_catalog.format('CREATE on the schema is granted to %s',
               CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0::pg_catalog.oid THEN 'PUBLIC'
                    ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END) AS what
      FROM n, pg_catalog.aclexplode(n.nspacl) a
     WHERE a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'::pg_catalog.text
       AND a.grantee NOT IN (SELECT oid FROM trusted)
    UNION ALL
    SELECT 2, pg_catalog.format('function %s is owned by %s', p.oid::pg_catalog.regprocedure,
               pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(p.proowner)))
      FROM n JOIN pg_catalog.pg_proc p ON p.pronamespace OPERATOR(pg_catalog.=) n.oid
     WHERE p.proowner NOT IN (SELECT oid FROM trusted)
    UNION ALL
    SELECT 3, pg_catalog.format('operator %s is owned by %s', o.oid::pg_catalog.regoperator,
               pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(o.oprowner)))
      FROM n JOIN pg_catalog.pg_operator o ON o.oprnamespace OPERATOR(pg_catalog.=) n.oid
     WHERE o.oprowner NOT IN (SELECT oid FROM trusted)
    UNION ALL
    SELECT 4, pg_catalog.format('relation %s is owned by %s', c.oid::pg_catalog.regclass,
               pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(c.relowner)))
      FROM n JOIN pg_catalog.pg_class c ON c.relnamespace OPERATOR(pg_catalog.=) n.oid
     WHERE c.relowner NOT IN (SELECT oid FROM trusted)
    UNION ALL
    SELECT 5, pg_catalog.format('type %s is owned by %s', t.oid::pg_catalog.regtype,
               pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(t.typowner)))
      FROM n JOIN pg_catalog.pg_type t ON t.typnamespace OPERATOR(pg_catalog.=) n.oid
     WHERE t.typowner NOT IN (SELECT oid FROM trusted)
) found
ORDER BY rank
LIMIT 1
