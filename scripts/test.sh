#!/usr/bin/env bash
# Sets up a fresh machine if needed, then checks formatting, lints and
# docs (no rustdoc warnings), the Go checker of tools/porcupine, and runs
# every test (unit, property and the
# multi-process integration tests) in the release profile.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
source scripts/env.sh
cargo fmt --all -- --check
# The chaos runs' Porcupine checker (Go): formatted, vetted, its own tests.
(cd tools/porcupine && test -z "$(gofmt -l .)" && go vet ./... && go test ./...)
cargo clippy --release --workspace --all-targets --locked --features "$QUARRY_FEATURES" -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --release --workspace --no-deps --locked --features "$QUARRY_FEATURES"
# A shared target dir built last from another checkout (CI's clone, or a
# second worktree) holds crates that embed that checkout's path
# (env!("CARGO_MANIFEST_DIR"): the tests' files, the chaos checker's
# sources), and cargo reuses them when this checkout's files are older.
# Touching those sources rebuilds them here.
checkout="$CARGO_TARGET_DIR/.last-checkout"
if [ "$(cat "$checkout" 2>/dev/null)" != "$PWD" ]; then
    grep -rl --include='*.rs' 'CARGO_MANIFEST_DIR' src tests compute | xargs -r touch
    echo "$PWD" >"$checkout"
fi
# Every test binary prints its own "test result" line; the last line here
# adds them up, so the run's closing line counts every test.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --release --workspace --locked --features "$QUARRY_FEATURES" "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
awk '/^test result:/ { p += $4; f += $6 } END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
