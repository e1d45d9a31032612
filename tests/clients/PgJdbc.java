// pgjdbc (org.postgresql:postgresql from Maven Central) against Quarry's
// PostgreSQL listener, unchanged client code: TPC-H Q6, a prepared
// statement run past prepareThreshold (binary transfer), getBigDecimal,
// a transaction, DatabaseMetaData (getTables, getColumns, getTypeInfo), and
// Statement.cancel.
//
// Usage: java -cp postgresql.jar PgJdbc.java JDBC_URL Q6_FILE
// Prints sections ("== name", then CSV lines); tests/postgres.rs checks them.

import java.math.BigDecimal;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.*;

public class PgJdbc {
    static void section(String name, ResultSet rs) throws SQLException {
        System.out.println("== " + name);
        ResultSetMetaData md = rs.getMetaData();
        StringBuilder header = new StringBuilder();
        for (int i = 1; i <= md.getColumnCount(); i++) {
            if (i > 1) header.append(',');
            header.append(md.getColumnLabel(i));
        }
        System.out.println(header);
        while (rs.next()) {
            StringBuilder row = new StringBuilder();
            for (int i = 1; i <= md.getColumnCount(); i++) {
                if (i > 1) row.append(',');
                Object v = rs.getObject(i);
                row.append(v == null ? "" : v instanceof BigDecimal ? ((BigDecimal) v).toPlainString() : v.toString());
            }
            System.out.println(row);
        }
    }

    public static void main(String[] args) throws Exception {
        String url = args[0];
        String q6 = Files.readString(Path.of(args[1]));
        try (Connection c = DriverManager.getConnection(url)) {
            try (Statement s = c.createStatement()) {
                section("q6", s.executeQuery(q6));
            }
            // Past prepareThreshold=1 the driver asks for binary results.
            try (PreparedStatement p = c.prepareStatement(
                    "SELECT sum(l_extendedprice * l_discount) AS revenue FROM lineitem"
                            + " WHERE l_quantity < ? AND l_shipdate >= ?")) {
                System.out.println("== prepared");
                System.out.println("run,revenue");
                for (int run = 1; run <= 3; run++) {
                    p.setBigDecimal(1, new BigDecimal("24"));
                    p.setDate(2, Date.valueOf("1994-01-01"));
                    try (ResultSet rs = p.executeQuery()) {
                        rs.next();
                        System.out.println(run + "," + rs.getBigDecimal(1).toPlainString());
                    }
                }
            }
            try (Statement s = c.createStatement()) {
                s.execute("CREATE TABLE pg_jdbc (id BIGINT PRIMARY KEY, amount DECIMAL(12,2), name VARCHAR)");
            }
            c.setAutoCommit(false);
            try (PreparedStatement p = c.prepareStatement("INSERT INTO pg_jdbc VALUES (?, ?, ?)")) {
                for (int i = 1; i <= 3; i++) {
                    p.setLong(1, i);
                    p.setBigDecimal(2, new BigDecimal(i + ".25"));
                    p.setString(3, "n" + i);
                    p.executeUpdate();
                }
            }
            c.rollback();
            try (PreparedStatement p = c.prepareStatement("INSERT INTO pg_jdbc VALUES (?, ?, ?)")) {
                p.setLong(1, 7);
                p.setBigDecimal(2, new BigDecimal("-7.50"));
                p.setString(3, "seven");
                System.out.println("== update count");
                System.out.println("count");
                System.out.println(p.executeUpdate());
            }
            c.commit();
            c.setAutoCommit(true);
            try (Statement s = c.createStatement()) {
                section("after commit", s.executeQuery("SELECT id, amount, name FROM pg_jdbc ORDER BY id"));
            }
            // executeBatch in autocommit: one Sync, one implicit
            // transaction; a duplicate key in the last row leaves none.
            try (PreparedStatement p = c.prepareStatement("INSERT INTO pg_jdbc (id, name) VALUES (?, ?)")) {
                for (long id : new long[] {20, 21, 7}) {
                    p.setLong(1, id);
                    p.setString(2, "batch");
                    p.addBatch();
                }
                String failed = "none";
                try {
                    p.executeBatch();
                } catch (java.sql.BatchUpdateException e) {
                    failed = e.getSQLState();
                }
                try (Statement s = c.createStatement();
                        ResultSet rs = s.executeQuery("SELECT count(*) FROM pg_jdbc WHERE name = 'batch'")) {
                    rs.next();
                    System.out.println("== batch");
                    System.out.println("failed,left");
                    System.out.println(failed + "," + rs.getLong(1));
                }
            }
            DatabaseMetaData md = c.getMetaData();
            System.out.println("== product");
            System.out.println("name,major");
            System.out.println(md.getDatabaseProductName() + "," + md.getDatabaseMajorVersion());
            try (ResultSet rs = md.getTables(null, "public", "pg_jdbc", new String[] {"TABLE"})) {
                System.out.println("== tables");
                System.out.println("TABLE_SCHEM,TABLE_NAME");
                while (rs.next()) {
                    System.out.println(rs.getString("TABLE_SCHEM") + "," + rs.getString("TABLE_NAME"));
                }
            }
            try (ResultSet rs = md.getColumns(null, "public", "pg_jdbc", null)) {
                System.out.println("== columns");
                System.out.println("COLUMN_NAME,TYPE_NAME,DATA_TYPE");
                while (rs.next()) {
                    System.out.println(rs.getString("COLUMN_NAME") + "," + rs.getString("TYPE_NAME")
                            + "," + rs.getInt("DATA_TYPE"));
                }
            } catch (SQLException e) {
                System.out.println("== columns");
                System.out.println("error " + e.getSQLState() + " " + e.getMessage().lines().findFirst().orElse(""));
            }
            // getTypeInfo: the types pgjdbc reads from pg_type, with java.sql.Types.
            try (ResultSet rs = md.getTypeInfo()) {
                java.util.TreeMap<String, Integer> types = new java.util.TreeMap<>();
                while (rs.next()) {
                    types.put(rs.getString("TYPE_NAME"), rs.getInt("DATA_TYPE"));
                }
                System.out.println("== type info");
                System.out.println("TYPE_NAME,DATA_TYPE");
                for (String name : new String[] {"bool", "date", "float8", "int4", "int8", "numeric", "text", "timestamp", "varchar"}) {
                    System.out.println(name + "," + types.get(name));
                }
                System.out.println("== type info count");
                System.out.println("many");
                System.out.println(types.size() > 50);
            }
            // Cancel: a long query, cancelled from another thread.
            try (Statement s = c.createStatement()) {
                Thread t = new Thread(() -> {
                    try {
                        Thread.sleep(500);
                        s.cancel();
                    } catch (Exception e) {
                        throw new RuntimeException(e);
                    }
                });
                t.start();
                String state = "finished";
                try {
                    s.executeQuery("SELECT count(*) FROM lineitem a, lineitem b"
                            + " WHERE a.l_orderkey + b.l_orderkey < 0");
                } catch (SQLException e) {
                    state = e.getSQLState();
                }
                t.join();
                System.out.println("== cancel");
                System.out.println("sqlstate");
                System.out.println(state);
            }
            try (Statement s = c.createStatement()) {
                section("after cancel", s.executeQuery("SELECT 1 AS one"));
            }
        }
    }
}
