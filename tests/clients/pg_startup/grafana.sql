-- Grafana PostgreSQL data source: SQL sent by the health check ("Save & test"),
-- the config page version/TimescaleDB auto-detection, and the query builder's
-- table list and column list.
--
-- Source repository: https://github.com/grafana/grafana
--   public/app/plugins/datasource/grafana-postgresql-datasource/postgresMetaQuery.ts (commit 12f912ab8d010f4d95a4043a0efaa20fc4ca0100)
--   public/app/plugins/datasource/grafana-postgresql-datasource/datasource.ts (commit 04282cd93150390a7d83089cc520d96546d576a8)
--   public/app/plugins/datasource/grafana-postgresql-datasource/configuration/useAutoDetectFeatures.ts (commit 3af0110a1a2192523521267b47ee6fede2c8ec57)
--   pkg/tsdb/grafana-postgresql-datasource/pgx/handler_checkhealth.go (commit 1b13755cdccfbc5420c9fcb7d6cf2dad7b2888e6)
--   public/app/plugins/datasource/postgres/datasource.ts, older (Grafana 8/9) version: testDatasource, getVersion
--     (the index held that older text without its commit id)
-- Template strings are rendered exactly (whitespace kept) for table 'lineitem'.
--
-- Health check: CheckHealth calls pgxpool Pool.Ping, which runs pgx PgConn.Ping
-- (github.com/jackc/pgx pgconn/pgconn.go): Exec(ctx, "-- ping"), a simple-protocol
-- Query message whose whole text is the comment "-- ping" (EmptyQueryResponse expected).
-- The older lib/pq code path (sqleng/handler_checkhealth.go -> database/sql Ping ->
-- github.com/lib/pq conn.go Ping) sends the simple query ";".
-- Neither fits this one-statement-per-semicolon format, so they are documented here
-- instead of being listed below.

-- source: public/app/plugins/datasource/postgres/datasource.ts:testDatasource (Grafana 8/9 "Save & test")
SELECT 1;

-- source: postgresMetaQuery.ts:getVersion (config page version auto-detect, useAutoDetectFeatures.ts)
SELECT current_setting('server_version_num')::int/100 as version;

-- source: public/app/plugins/datasource/postgres/datasource.ts:getVersion (Grafana 8/9 version query, no alias)
SELECT current_setting('server_version_num')::int/100;

-- source: postgresMetaQuery.ts:getTimescaleDBVersion (config page TimescaleDB auto-detect, server >= 9.6)
SELECT extversion FROM pg_extension WHERE extname = 'timescaledb';

-- source: postgresMetaQuery.ts:showTables (query builder table list, datasource.ts:fetchTables)
SELECT
    CASE WHEN 
          quote_ident(table_schema) IN (
          SELECT
            CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
          FROM
            generate_series(
              array_lower(string_to_array(current_setting('search_path'),','),1),
              array_upper(string_to_array(current_setting('search_path'),','),1)
            ) as i,
            string_to_array(current_setting('search_path'),',') s
          )
      THEN quote_ident(table_name)
      ELSE quote_ident(table_schema) || '.' || quote_ident(table_name)
    END AS "table"
    FROM information_schema.tables
    WHERE quote_ident(table_schema) NOT IN ('information_schema',
                             'pg_catalog',
                             '_timescaledb_cache',
                             '_timescaledb_catalog',
                             '_timescaledb_internal',
                             '_timescaledb_config',
                             'timescaledb_information',
                             'timescaledb_experimental')
    ORDER BY CASE WHEN 
          quote_ident(table_schema) IN (
          SELECT
            CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
          FROM
            generate_series(
              array_lower(string_to_array(current_setting('search_path'),','),1),
              array_upper(string_to_array(current_setting('search_path'),','),1)
            ) as i,
            string_to_array(current_setting('search_path'),',') s
          ) THEN 0 ELSE 1 END, 1;

-- source: postgresMetaQuery.ts:getSchema (query builder column list for table lineitem, datasource.ts:fetchFields)
SELECT quote_ident(column_name) AS "column", data_type AS "type"
    FROM information_schema.columns
    WHERE
      CASE WHEN array_length(parse_ident('lineitem'),1) = 2
        THEN quote_ident(table_schema) = (parse_ident('lineitem'))[1]
          AND quote_ident(table_name) = (parse_ident('lineitem'))[2]
        ELSE quote_ident(table_name) = 'lineitem'
          AND 
          quote_ident(table_schema) IN (
          SELECT
            CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
          FROM
            generate_series(
              array_lower(string_to_array(current_setting('search_path'),','),1),
              array_upper(string_to_array(current_setting('search_path'),','),1)
            ) as i,
            string_to_array(current_setting('search_path'),',') s
          )
      END;
