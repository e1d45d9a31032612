#!/usr/bin/env bash
# Installs what building Quarry needs on a fresh Debian/Ubuntu machine:
# a C++ toolchain and libclang (RocksDB's bindings are generated with
# bindgen), and Rust through rustup if cargo is missing. protoc is not
# needed: it comes from the protoc-bin-vendored crate.
set -euo pipefail

need=()
command -v c++ >/dev/null 2>&1 || need+=(g++)
command -v make >/dev/null 2>&1 || need+=(make)
command -v curl >/dev/null 2>&1 || need+=(curl ca-certificates)
# libclang: a libclang.so that bindgen can load (libclang-cpp.so, which some
# images carry alone, is not one).
# (`ls` of several patterns fails when any one matches nothing, so the
# listing is counted instead.)
if ! ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/llvm-*/lib/libclang-[0-9]*.so* \
    /usr/lib/*-linux-gnu/libclang.so* /usr/lib/*-linux-gnu/libclang-[0-9]*.so* 2>/dev/null | grep -q .; then
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
