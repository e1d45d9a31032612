#!/usr/bin/env bash
# Installs what building Quarry needs on a fresh Debian/Ubuntu machine:
# a C++ toolchain and libclang (RocksDB's bindings are generated with
# bindgen), and Rust through rustup if cargo is missing. protoc is not
# needed: it comes from the protoc-bin-vendored crate. The client tests
# also get a Python venv with ADBC's Flight SQL driver from PyPI
# ($QUARRY_VENV) and the Arrow Flight SQL JDBC driver from Maven Central
# with Java 17 ($QUARRY_JDBC_JAR; see env.sh).
set -euo pipefail

need=()
command -v c++ >/dev/null 2>&1 || need+=(g++)
command -v make >/dev/null 2>&1 || need+=(make)
command -v curl >/dev/null 2>&1 || need+=(curl ca-certificates)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
# Go builds the chaos runs' Porcupine checker (tools/porcupine).
command -v go >/dev/null 2>&1 || need+=(golang-go)
# psql for the PostgreSQL front end's tests (tests/postgres.rs).
command -v psql >/dev/null 2>&1 || need+=(postgresql-client)
# A PostgreSQL server that tests/postgres.rs answers the same queries with.
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need+=(postgresql)
# Headless Chromium for the web console's browser test (tests/console.rs).
command -v chromium >/dev/null 2>&1 || need+=(chromium)
# libclang: a libclang.so that bindgen can load (libclang-cpp.so, which some
# images carry alone, is not one).
# (`ls` of several patterns fails when any one matches nothing, and
# pipefail would pass that on, so the listing is counted instead.)
if ! { ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/llvm-*/lib/libclang-[0-9]*.so* \
    /usr/lib/*-linux-gnu/libclang.so* /usr/lib/*-linux-gnu/libclang-[0-9]*.so* 2>/dev/null || true; } | grep -q .; then
  need+=(libclang-dev)
fi
if ((${#need[@]})); then
  echo "installing system packages: ${need[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi

if ! command -v cargo >/dev/null 2>&1; then
  if [[ -x $HOME/.cargo/bin/cargo ]]; then
    export PATH=$HOME/.cargo/bin:$PATH
  else
    echo "installing Rust with rustup"
    curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c rustfmt,clippy
    export PATH=$HOME/.cargo/bin:$PATH
  fi
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

# Python clients for the client tests (tests/clients.rs).
source "$(dirname "$0")/env.sh"
if ! "$QUARRY_VENV/bin/python" -c 'import adbc_driver_flightsql.dbapi, pyarrow' >/dev/null 2>&1; then
  echo "installing the Python ADBC Flight SQL driver into $QUARRY_VENV"
  python3 -m venv "$QUARRY_VENV"
  "$QUARRY_VENV/bin/pip" install -q "adbc_driver_flightsql==1.13.0" "pyarrow==26.0.1"
fi
# DuckDB for `bench tpch --compare` (and tests/cluster.rs's check of it).
if ! "$QUARRY_VENV/bin/python" -c 'import duckdb' >/dev/null 2>&1; then
  echo "installing DuckDB into $QUARRY_VENV"
  "$QUARRY_VENV/bin/pip" install -q "duckdb==2.0.1"
fi
# PostgreSQL clients for tests/postgres.rs.
if ! "$QUARRY_VENV/bin/python" -c 'import psycopg, asyncpg, sqlalchemy' >/dev/null 2>&1; then
  echo "installing psycopg, asyncpg and SQLAlchemy into $QUARRY_VENV"
  "$QUARRY_VENV/bin/pip" install -q "psycopg[binary]==3.2.10" "asyncpg==0.32.0" "sqlalchemy==2.1.9"
fi
# Playwright drives the system's Chromium for tests/console.rs (its own
# browser downloads are not used).
if ! "$QUARRY_VENV/bin/python" -c 'import playwright.sync_api' >/dev/null 2>&1; then
  echo "installing Playwright into $QUARRY_VENV"
  "$QUARRY_VENV/bin/pip" install -q "playwright==1.65.2"
fi

# The JDBC driver for the client tests: one shaded jar, fetched by Maven
# into its local repository (~/.m2), where env.sh points.
if [[ ! -f $QUARRY_JDBC_JAR ]]; then
  echo "fetching the Arrow Flight SQL JDBC driver $QUARRY_JDBC_VERSION with Maven"
  mvn -q -B dependency:get -Dtransitive=false \
    "-Dartifact=org.apache.arrow:flight-sql-jdbc-driver:$QUARRY_JDBC_VERSION"
fi

# PostgreSQL's JDBC driver (pgjdbc) for tests/postgres.rs.
if [[ ! -f $QUARRY_PGJDBC_JAR ]]; then
  echo "fetching pgjdbc $QUARRY_PGJDBC_VERSION with Maven"
  mvn -q -B dependency:get -Dtransitive=false \
    "-Dartifact=org.postgresql:postgresql:$QUARRY_PGJDBC_VERSION"
fi
