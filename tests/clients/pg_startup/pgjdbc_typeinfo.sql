-- pgjdbc DatabaseMetaData.getTypeInfo(): the SQL it sends, in order.
--
-- Source repository: https://github.com/pgjdbc/pgjdbc
-- Tag: REL42.7.13 (commit 3297557c6a8059d0d6e3522c79f0bd9a6f82ee07); the same text is on master at
--   3a699d57d957ca0c2b86e619d001a8763a130027.
-- Files: pgjdbc/src/main/java/org/postgresql/jdbc/PgDatabaseMetaData.java (getTypeInfo)
--        pgjdbc/src/main/java/org/postgresql/jdbc/TypeInfoCache.java (cacheSQLTypes, getSQLTypeQuery)
--
-- Java string concatenations are joined exactly (double spaces kept).
-- With the connection property hideUnprivilegedObjects=true (server >= 9.2) the first
-- statement gets " AND has_type_privilege(t.oid, 'USAGE')" appended; default is false.
-- The TYPE_NAME -> java.sql.Types mapping for each row is then answered from the cache
-- filled by the second statement, so no per-type queries follow.

-- source: PgDatabaseMetaData.java:getTypeInfo (list of type names and oids, plain Statement)
SELECT t.typname,t.oid FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON (t.typnamespace = n.oid)  WHERE n.nspname  != 'pg_toast' AND  (t.typrelid = 0 OR (SELECT c.relkind = 'c' FROM pg_catalog.pg_class c WHERE c.oid = t.typrelid));

-- source: TypeInfoCache.java:cacheSQLTypes / getSQLTypeQuery(false) (all types with array/typtype info, prepared statement; the source string already ends in a semicolon)
SELECT typinput='pg_catalog.array_in'::regproc as is_array, typtype, typname, pg_type.oid   FROM pg_catalog.pg_type   LEFT JOIN (select ns.oid as nspoid, ns.nspname, r.r           from pg_namespace as ns           join ( select s.r, (current_schemas(false))[s.r] as nspname                    from generate_series(1, array_upper(current_schemas(false), 1)) as s(r) ) as r          using ( nspname )        ) as sp     ON sp.nspoid = typnamespace  ORDER BY sp.r, pg_type.oid DESC;
