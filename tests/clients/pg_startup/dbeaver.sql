-- DBeaver PostgreSQL plugin: SQL sent on connect and while expanding the
-- database navigator (database -> schema "public" -> table "lineitem").
--
-- Source repository: https://github.com/dbeaver/dbeaver
-- Commit: 2428359b748778a5a345432906ab3da69289c20c (git describe 24.2.3-21-g2428359b74, 2024-10-24)
-- Files (under plugins/org.jkiss.dbeaver.ext.postgresql/src/org/jkiss/dbeaver/ext/postgresql/):
--   model/PostgreDataSource.java, model/PostgreExecutionContext.java,
--   model/PostgreDatabase.java, model/PostgreSchema.java, PostgreUtils.java
--
-- Statement text is the Java string concatenation with "\n" turned into real
-- newlines (trailing spaces kept). JDBC '?' parameters are filled with literals:
-- database 'quarry', schema public = oid 2200, table lineitem = oid 16384.
-- Default connection settings assumed: server >= 12, "show all databases" off,
-- "read all data types" off, no navigator filters.
-- Order follows the code path: initializeRemoteInstance -> refreshDefaults ->
-- initialize -> cacheDataTypes, then navigator expansion.

-- source: model/PostgreDatabase.java:readDatabaseInfo (connect, default database row)
SELECT db.oid,db.* FROM pg_catalog.pg_database db WHERE datname='quarry';

-- source: model/PostgreExecutionContext.java:refreshDefaults (active schema and user)
SELECT current_schema(),session_user;

-- source: model/PostgreDatabase.java:SchemaCache.prepareLookupStatement (schema list, pre-cached by refreshDefaults)
SELECT n.oid,n.*,d.description FROM pg_catalog.pg_namespace n
LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid=n.oid AND d.objsubid=0 AND d.classoid='pg_namespace'::regclass
 ORDER BY nspname;

-- source: model/PostgreExecutionContext.java:refreshDefaults (search path)
SHOW search_path;

-- source: model/PostgreDataSource.java:SettingCache.prepareLookupStatement (preload standard_conforming_strings)
select * from pg_catalog.pg_settings where name='standard_conforming_strings';

-- source: model/PostgreDataSource.java:initialize (server version string)
SELECT version();

-- source: PostgreUtils.java:getQueryForSystemColumnChecking via PostgreDataSource.initialize (pg_enum probe, server >= 12)
SELECT * FROM pg_catalog.pg_enum WHERE 1<>1 LIMIT 1;

-- source: PostgreUtils.java:getQueryForSystemColumnChecking via PostgreDataSource.initialize (pg_class.reltype probe)
SELECT reltype FROM pg_catalog.pg_class WHERE 1<>1 LIMIT 1;

-- source: model/PostgreDatabase.java:cacheDataTypes (data type cache, server >= 10 so no typcategory probe)
SELECT t.oid,t.*,c.relkind,format_type(nullif(t.typbasetype, 0), t.typtypmod) as base_type_name, d.description
FROM pg_catalog.pg_type t
LEFT OUTER JOIN pg_catalog.pg_type et ON et.oid=t.typelem 
LEFT OUTER JOIN pg_catalog.pg_class c ON c.oid=t.typrelid
LEFT OUTER JOIN pg_catalog.pg_description d ON t.oid=d.objoid
WHERE t.typname IS NOT NULL
AND (c.relkind IS NULL OR c.relkind = 'c') AND (et.typcategory IS NULL OR et.typcategory <> 'C');

-- source: model/PostgreDatabase.java:EnumValueCache.prepareObjectsStatement (enum values, after cacheDataTypes)
SELECT * FROM pg_catalog.pg_enum;

-- source: model/PostgreDataSource.java:prepareReadDatabaseListStatement (database list, only with "show all databases" on)
SELECT db.oid,db.* FROM pg_catalog.pg_database db WHERE 1 = 1 AND datallowconn AND NOT datistemplate OR db.datname ='quarry'
ORDER BY db.datname;

-- source: model/PostgreDataSource.java:loadAvailableDatabases (current database, only when the active name is unknown)
SELECT current_database();

-- source: model/PostgreDatabase.java:getDescription (database description shown in the navigator/properties)
select description from pg_shdescription join pg_database on objoid = pg_database.oid where datname = 'quarry';

-- source: model/PostgreDatabase.java:RoleCache.prepareObjectsStatement (Roles folder)
SELECT a.oid,a.*,pd.description FROM pg_catalog.pg_roles a 
left join pg_catalog.pg_shdescription pd on a.oid = pd.objoid
ORDER BY a.rolname;

-- source: model/PostgreSchema.java:TableCache.prepareLookupStatement (expand schema public: tables, server >= 10)
SELECT c.oid,c.*,d.description,pg_catalog.pg_get_expr(c.relpartbound, c.oid) as partition_expr,  pg_catalog.pg_get_partkeydef(c.oid) as partition_key 
FROM pg_catalog.pg_class c
LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid=c.oid AND d.objsubid=0 AND d.classoid='pg_class'::regclass
WHERE c.relnamespace=2200 AND c.relkind not in ('i','I','c');

-- source: model/PostgreSchema.java:TableCache.prepareChildrenStatement (expand table lineitem: columns)
SELECT c.relname,a.*,pg_catalog.pg_get_expr(ad.adbin, ad.adrelid, true) as def_value,dsc.description,dep.objid
FROM pg_catalog.pg_attribute a
INNER JOIN pg_catalog.pg_class c ON (a.attrelid=c.oid)
LEFT OUTER JOIN pg_catalog.pg_attrdef ad ON (a.attrelid=ad.adrelid AND a.attnum = ad.adnum)
LEFT OUTER JOIN pg_catalog.pg_description dsc ON (c.oid=dsc.objoid AND a.attnum = dsc.objsubid)
LEFT OUTER JOIN pg_depend dep on dep.refobjid = a.attrelid AND dep.deptype = 'i' and dep.refobjsubid = a.attnum and dep.classid = dep.refclassid
WHERE NOT a.attisdropped AND c.relkind not in ('i','I','c') AND c.oid=16384
ORDER BY a.attnum;

-- source: model/PostgreSchema.java:ConstraintCache.prepareObjectsStatement (expand table lineitem: constraints)
SELECT c.oid,c.*,t.relname as tabrelname,rt.relnamespace as refnamespace,d.description, case when c.contype='c' then "substring"(pg_get_constraintdef(c.oid), 7) else null end consrc_copy
FROM pg_catalog.pg_constraint c
INNER JOIN pg_catalog.pg_class t ON t.oid=c.conrelid
LEFT OUTER JOIN pg_catalog.pg_class rt ON rt.oid=c.confrelid
LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid=c.oid AND d.objsubid=0 AND d.classoid='pg_constraint'::regclass
WHERE c.conrelid=16384
ORDER BY c.oid;

-- source: model/PostgreSchema.java:IndexCache.prepareObjectsStatement (expand table lineitem: indexes)
SELECT i.*,i.indkey as keys,c.relname,c.relnamespace,c.relam,c.reltablespace,tc.relname as tabrelname,dsc.description,pg_catalog.pg_get_expr(i.indpred, i.indrelid) as pred_expr,pg_catalog.pg_get_expr(i.indexprs, i.indrelid, true) as expr,pg_catalog.pg_relation_size(i.indexrelid) as index_rel_size,pg_catalog.pg_stat_get_numscans(i.indexrelid) as index_num_scans
FROM pg_catalog.pg_index i
INNER JOIN pg_catalog.pg_class c ON c.oid=i.indexrelid
INNER JOIN pg_catalog.pg_class tc ON tc.oid=i.indrelid
LEFT OUTER JOIN pg_catalog.pg_description dsc ON i.indexrelid=dsc.objoid
WHERE  i.indrelid=16384 ORDER BY c.relname;

-- source: model/PostgreSchema.java:cacheTableInheritance (schema structure cache: table inheritance)
SELECT i.inhrelid relid, pc.relnamespace parent_ns, pc.oid parent_oid, i.inhseqno
FROM pg_catalog.pg_inherits i, pg_class rc, pg_class pc
WHERE rc.oid=i.inhrelid AND rc.relnamespace=2200 AND pc.oid=i.inhparent;
