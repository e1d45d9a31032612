#!/usr/bin/env bash
# Sets up a fresh machine if needed, builds Quarry, starts an embedded local
# cluster (3 storage processes + 1 compute), loads TPC-H lineitem and times
# Q1 and Q6, checking the answers against DuckDB's.
# Arguments go to `quarry bench tpch` (default: --sf 1).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
cargo build --release --locked --features "$QUARRY_FEATURES" --bin quarry
args=("$@")
[[ ${#args[@]} -eq 0 ]] && args=(--sf 1)
exec "$CARGO_TARGET_DIR/release/quarry" bench tpch "${args[@]}"
