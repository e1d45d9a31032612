# Shared settings, sourced by the other scripts: one persistent target dir
# outside the clone and one profile (release) for the bench and the tests,
# so nothing is compiled twice.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/quarry-target}
export PATH=$HOME/.cargo/bin:$PATH
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
# A Python venv with the ADBC Flight SQL driver, for the client tests
# (scripts/setup.sh fills it).
export QUARRY_VENV=${QUARRY_VENV:-$HOME/.cache/quarry-venv}
