//! Real clients against real processes: Python ADBC (the Flight SQL
//! driver from PyPI, installed into `$QUARRY_VENV` by `scripts/setup.sh`)
//! runs its scripts in `tests/clients/` unchanged against a playground.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::*;

/// The venv's Python, or a failure that says how to get it.
fn python() -> PathBuf {
    let venv = std::env::var_os("QUARRY_VENV")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/quarry-venv")))
        .expect("neither QUARRY_VENV nor HOME is set");
    let python = venv.join("bin/python");
    let ok = Command::new(&python)
        .args(["-c", "import adbc_driver_flightsql.dbapi, pyarrow"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{} cannot import the ADBC Flight SQL driver: run scripts/setup.sh (or set QUARRY_VENV)",
        python.display()
    );
    python
}

/// Runs `tests/clients/{script}` against the playground; its output.
fn run_script(pg: &Playground, script: &str) -> String {
    let uri = pg.compute.replace("http://", "grpc://");
    let out = Command::new(python())
        .arg(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/clients")
                .join(script),
        )
        .arg(&uri)
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{script} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn adbc_without_autocommit_commits_and_rolls_back_transactions() {
    let _serial = SERIAL.lock();
    let pg = Playground::start(&["--stores", "3"]);
    let out = run_script(&pg, "adbc_transactions.py");
    assert_eq!(
        out,
        "inside [(70,), (130,)]\n\
         others before commit [(100,), (100,)]\n\
         others after commit [(70,), (130,)]\n\
         locked [(70,)]\n\
         inside before rollback [(70,)]\n\
         after rollback [(70,), (130,)]\n"
    );
}
