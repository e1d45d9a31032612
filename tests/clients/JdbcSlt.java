// The queries of a sqllogictest file through the Arrow Flight SQL JDBC
// driver, unchanged client code: each must run (the driver builds its
// ResultSetMetaData from the schema GetFlightInfo announced and reads the
// stream with it) and print what the file expects, with SQLite's runner's
// formatting (I, R and T as in src/slt.rs).
//
// Usage: java -cp DRIVER.jar JdbcSlt.java JDBC_URL FILE.slt
// Prints "== summary" (queries run, failures) and "== failures" (one line
// each); tests/clients.rs checks them.

import java.math.BigDecimal;
import java.math.RoundingMode;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

public class JdbcSlt {
  record Query(String letters, String sql, List<String> want) {}

  static List<Query> records(String path) throws Exception {
    String[] lines = Files.readString(Path.of(path)).split("\n", -1);
    List<Query> out = new ArrayList<>();
    int i = 0;
    while (i < lines.length) {
      String[] words = lines[i].trim().split("\\s+");
      if (!words[0].equals("query")) {
        i++;
        continue;
      }
      String letters = words[1];
      i++;
      StringBuilder sql = new StringBuilder();
      while (!lines[i].equals("----")) {
        if (sql.length() > 0) sql.append('\n');
        sql.append(lines[i++]);
      }
      i++;
      List<String> want = new ArrayList<>();
      while (i < lines.length && !lines[i].isBlank()) want.add(lines[i++]);
      out.add(new Query(letters, sql.toString(), want));
    }
    return out;
  }

  static final Pattern LEADING_INT = Pattern.compile("^\\s*([+-]?\\d+)");

  static double real(Object v) {
    if (v instanceof Number n) return n.doubleValue();
    if (v instanceof Boolean b) return b ? 1 : 0;
    try {
      return Double.parseDouble(v.toString().trim());
    } catch (NumberFormatException e) {
      return 0;
    }
  }

  static String fmt(Object v, char letter) {
    if (v == null) return "NULL";
    switch (letter) {
      case 'I':
        if (v instanceof Boolean b) return b ? "1" : "0";
        if (v instanceof BigDecimal d) return d.setScale(0, RoundingMode.DOWN).toPlainString();
        if (v instanceof Double || v instanceof Float) return Long.toString((long) real(v));
        if (v instanceof Number n) return Long.toString(n.longValue());
        Matcher m = LEADING_INT.matcher(v.toString());
        return m.find() ? Long.toString(Long.parseLong(m.group(1).replace("+", ""))) : "0";
      case 'R':
        if (v instanceof BigDecimal d) return d.setScale(3, RoundingMode.HALF_EVEN).toPlainString();
        return String.format(Locale.ROOT, "%.3f", real(v));
      default:
        String text =
            v instanceof BigDecimal d
                ? d.toPlainString()
                : v instanceof Boolean b ? (b ? "true" : "false") : v.toString();
        if (text.isEmpty()) return "(empty)";
        StringBuilder s = new StringBuilder();
        for (char c : text.toCharArray()) s.append(c >= ' ' && c <= '~' ? c : '@');
        return s.toString();
    }
  }

  // Rows equal value by value; a float shown as text may differ in its last
  // digits between languages' printers.
  static boolean same(List<List<Object[]>> got, List<String> want, String letters) {
    if (got.size() != want.size()) return false;
    for (int r = 0; r < got.size(); r++) {
      List<Object[]> row = got.get(r);
      String[] w = want.get(r).split(" ", -1);
      if (w.length != row.size() && row.size() == 1) w = new String[] {want.get(r)};
      if (w.length != row.size()) return false;
      for (int c = 0; c < w.length; c++) {
        String g = (String) row.get(c)[0];
        Object raw = row.get(c)[1];
        if (g.equals(w[c])) continue;
        char letter = c < letters.length() ? letters.charAt(c) : 'T';
        if (letter == 'T' && (raw instanceof Double || raw instanceof Float)) {
          try {
            double x = real(raw), y = Double.parseDouble(w[c]);
            if (Math.abs(x - y) <= 1e-12 * Math.max(Math.abs(x), Math.abs(y))) continue;
          } catch (NumberFormatException e) {
            // not a number: a mismatch
          }
        }
        return false;
      }
    }
    return true;
  }

  public static void main(String[] args) throws Exception {
    int run = 0;
    List<String> failures = new ArrayList<>();
    try (Connection conn = DriverManager.getConnection(args[0])) {
      for (Query q : records(args[1])) {
        run++;
        String one = q.sql().replace('\n', ' ');
        List<List<Object[]>> got = new ArrayList<>();
        try (Statement st = conn.createStatement();
            ResultSet rs = st.executeQuery(q.sql())) {
          int n = rs.getMetaData().getColumnCount();
          while (rs.next()) {
            List<Object[]> row = new ArrayList<>();
            for (int c = 1; c <= n; c++) {
              Object v = rs.getObject(c);
              char letter = c <= q.letters().length() ? q.letters().charAt(c - 1) : 'T';
              row.add(new Object[] {fmt(v, letter), v});
            }
            got.add(row);
          }
        } catch (Exception e) {
          String msg = String.valueOf(e.getMessage()).split("\n")[0];
          failures.add(one + ": " + e.getClass().getSimpleName() + ": " + msg);
          continue;
        }
        if (!same(got, q.want(), q.letters())) {
          List<String> shown = new ArrayList<>();
          for (List<Object[]> row : got) {
            List<String> vs = new ArrayList<>();
            for (Object[] v : row) vs.add((String) v[0]);
            shown.add(String.join(" ", vs));
          }
          failures.add(one + ": got " + shown + ", want " + q.want());
        }
      }
    }
    System.out.println("== summary");
    System.out.println("queries,failed");
    System.out.println(run + "," + failures.size());
    System.out.println("== failures");
    for (String f : failures) System.out.println(f);
  }
}
