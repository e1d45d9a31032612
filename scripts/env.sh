# Shared settings, sourced by the other scripts: one persistent target dir
# outside the clone and one profile (release) for the bench and the tests,
# so nothing is compiled twice.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/quarry-target}
export PATH=$HOME/.cargo/bin:$PATH
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
# A Python venv with the ADBC Flight SQL driver, for the client tests
# (scripts/setup.sh fills it).
export QUARRY_VENV=${QUARRY_VENV:-$HOME/.cache/quarry-venv}
# The Arrow Flight SQL JDBC driver (a shaded jar from Maven Central, which
# scripts/setup.sh fetches), for the client tests.
export QUARRY_JDBC_VERSION=${QUARRY_JDBC_VERSION:-18.3.0}
export QUARRY_JDBC_JAR=${QUARRY_JDBC_JAR:-$HOME/.m2/repository/org/apache/arrow/flight-sql-jdbc-driver/$QUARRY_JDBC_VERSION/flight-sql-jdbc-driver-$QUARRY_JDBC_VERSION.jar}
# PostgreSQL's JDBC driver (pgjdbc, one jar from Maven Central), for
# tests/postgres.rs.
export QUARRY_PGJDBC_VERSION=${QUARRY_PGJDBC_VERSION:-42.7.14}
export QUARRY_PGJDBC_JAR=${QUARRY_PGJDBC_JAR:-$HOME/.m2/repository/org/postgresql/postgresql/$QUARRY_PGJDBC_VERSION/postgresql-$QUARRY_PGJDBC_VERSION.jar}
# The one feature set of every build here: failpoints (fault injection for
# the failure tests, inert until switched on through a status port) are
# compiled in, so the bench and the tests share one build.
export QUARRY_FEATURES=${QUARRY_FEATURES:-quarry/failpoints}
