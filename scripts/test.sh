#!/usr/bin/env bash
# Sets up a fresh machine if needed, then checks formatting, lints and
# docs (no rustdoc warnings) and runs every test (unit, property and the
# multi-process integration tests) in the release profile.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
cargo fmt --all -- --check
cargo clippy --release --workspace --all-targets --locked -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --release --workspace --no-deps --locked
cargo test --release --workspace --locked "$@"
