// The Arrow Flight SQL JDBC driver (org.apache.arrow:flight-sql-jdbc-driver,
// fetched by scripts/setup.sh with Maven) against Quarry, unchanged JDBC
// code: TPC-H Q1 and Q6 as written, a PreparedStatement with bound
// parameters, INSERTs (plain, prepared, and a batch), a transaction rolled
// back and one committed (BEGIN/COMMIT/ROLLBACK as statements), and
// DatabaseMetaData (getTables, getColumns, getPrimaryKeys, getTableTypes).
//
// Usage: java -cp DRIVER_JAR JdbcFlightSql.java JDBC_URL Q1_FILE Q6_FILE
// Prints sections ("== name", then CSV lines); tests/clients.rs checks them.

import java.math.BigDecimal;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;

public class JdbcFlightSql {
  static String show(Object v) {
    if (v == null) {
      return "";
    }
    if (v instanceof BigDecimal) {
      return ((BigDecimal) v).toPlainString();
    }
    if (v instanceof Double || v instanceof Float) {
      return new BigDecimal(v.toString()).toPlainString();
    }
    return v.toString();
  }

  static void section(String name, ResultSet rs, String... columns) throws Exception {
    System.out.println("== " + name);
    ResultSetMetaData md = rs.getMetaData();
    List<String> names = new ArrayList<>();
    if (columns.length == 0) {
      for (int i = 1; i <= md.getColumnCount(); i++) {
        names.add(md.getColumnLabel(i));
      }
    } else {
      names = List.of(columns);
    }
    System.out.println(String.join(",", names));
    while (rs.next()) {
      List<String> row = new ArrayList<>();
      for (String c : names) {
        row.add(show(rs.getObject(c)));
      }
      System.out.println(String.join(",", row));
    }
    rs.close();
  }

  public static void main(String[] args) throws Exception {
    try (Connection conn = DriverManager.getConnection(args[0])) {
      try (Statement st = conn.createStatement()) {
        section("q1", st.executeQuery(Files.readString(Path.of(args[1]))));
        section("q6", st.executeQuery(Files.readString(Path.of(args[2]))));
      }
      try (PreparedStatement ps =
          conn.prepareStatement(
              "SELECT count(*) AS n FROM lineitem WHERE l_shipdate <= ? AND l_returnflag = ?")) {
        ps.setDate(1, java.sql.Date.valueOf("1998-09-02"));
        ps.setString(2, "R");
        section("bound", ps.executeQuery());
      }
      try (Statement st = conn.createStatement()) {
        st.executeUpdate(
            "CREATE TABLE t_jdbc (id BIGINT PRIMARY KEY, name VARCHAR, amount DECIMAL(12,2))");
        System.out.println("== plain insert");
        System.out.println("count");
        System.out.println(st.executeUpdate("INSERT INTO t_jdbc VALUES (1, 'it''s', 1.50)"));
      }
      try (PreparedStatement ps = conn.prepareStatement("INSERT INTO t_jdbc VALUES (?, ?, ?)")) {
        ps.setLong(1, 2);
        ps.setString(2, "b");
        ps.setBigDecimal(3, new BigDecimal("2.25"));
        System.out.println("== prepared insert");
        System.out.println("count");
        System.out.println(ps.executeUpdate());
        for (long id = 3; id <= 4; id++) {
          ps.setLong(1, id);
          ps.setNull(2, java.sql.Types.VARCHAR);
          ps.setBigDecimal(3, new BigDecimal("-3.00"));
          ps.addBatch();
        }
        ps.executeBatch();
      }
      try (Statement st = conn.createStatement()) {
        section("inserted", st.executeQuery("SELECT id, name, amount FROM t_jdbc ORDER BY id"));
      }
      // Transactions: the driver's commit() and rollback() are empty stubs,
      // so BEGIN, COMMIT and ROLLBACK go as statements; the connection's
      // cookie carries the transaction, and another connection has its own.
      String totals = "SELECT count(*) AS n, sum(amount) AS s FROM t_jdbc";
      try (Connection other = DriverManager.getConnection(args[0]);
          Statement st = conn.createStatement();
          Statement ot = other.createStatement()) {
        st.execute("BEGIN");
        st.executeUpdate("INSERT INTO t_jdbc VALUES (10, 'tx', 10.00)");
        st.executeUpdate("UPDATE t_jdbc SET amount = amount + 1 WHERE id = 1");
        section("txn inside", st.executeQuery(totals));
        section("txn other connection", ot.executeQuery(totals));
        st.execute("ROLLBACK");
        section("after rollback", st.executeQuery(totals));
        st.execute("BEGIN");
        st.executeUpdate("INSERT INTO t_jdbc VALUES (11, 'tx', 11.00)");
        section("before commit other connection", ot.executeQuery(totals));
        st.execute("COMMIT");
        section("after commit other connection", ot.executeQuery(totals));
        // Back in autocommit: a statement commits on its own.
        st.executeUpdate("INSERT INTO t_jdbc VALUES (12, 'auto', 0.00)");
        section("autocommit other connection", ot.executeQuery(totals));
      }
      DatabaseMetaData md = conn.getMetaData();
      section(
          "tables",
          md.getTables(null, null, "t_%", null),
          "TABLE_CAT",
          "TABLE_SCHEM",
          "TABLE_NAME",
          "TABLE_TYPE");
      section(
          "columns",
          md.getColumns(null, null, "t_jdbc", "%"),
          "TABLE_NAME",
          "COLUMN_NAME",
          "DATA_TYPE",
          "ORDINAL_POSITION");
      section(
          "primary keys",
          md.getPrimaryKeys(null, null, "t_jdbc"),
          "TABLE_NAME",
          "COLUMN_NAME",
          "KEY_SEQ");
      section("table types", md.getTableTypes(), "TABLE_TYPE");
    }
  }
}
