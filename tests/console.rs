//! The web console in a real browser: headless Chromium (Debian's
//! package, driven by Playwright from the venv) opens a compute process's
//! status port on a 3-store playground. The page must load with no
//! console errors and list the 3 stores up; then a query that never ends
//! by itself (a recursive CTE counting up from lineitem's row count) must
//! show in the running list with its plan, and its Cancel button must end
//! it: the query's client gets the cancel's error, and the query leaves
//! the list. The screenshot
//! is kept (`$CARGO_TARGET_DIR/artifacts/console.png`).

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

#[test]
fn the_console_lists_the_stores_and_cancels_a_running_query() {
    let python = venv_python("playwright.sync_api", "Playwright");
    assert!(
        std::path::Path::new("/usr/bin/chromium").exists(),
        "/usr/bin/chromium is missing: run scripts/setup.sh"
    );
    let pg = Playground::start_lineitem(&[]);
    let status = pg.status_urls.last().expect("compute's status URL").clone();
    // The page and its JSON, as a scraper sees them.
    let (code, page) = http(&status, "GET", "/", "");
    assert_eq!(code, 200);
    assert!(page.contains("<title>Quarry</title>"));
    let (code, cluster) = http(&status, "GET", "/api/cluster", "");
    assert_eq!(code, 200, "{cluster}");
    assert_eq!(cluster.matches("\"up\":true").count(), 4, "{cluster}");

    let dir = std::env::var("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| repo_path("target"))
        .join("artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    let shot = dir.join("console.png");
    let _ = std::fs::remove_file(&shot);
    let marker = "console_probe";
    let mut browser = Command::new(&python)
        .arg(repo_path("tests/clients/console.py"))
        .arg(format!("{status}/"))
        .arg(&shot)
        .arg(marker)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(browser.stdout.take().unwrap()).lines();
    let mut next_line = |browser: &mut std::process::Child| match lines.next() {
        Some(Ok(line)) => serde_json::from_str::<serde_json::Value>(&line).expect("a JSON line"),
        _ => {
            let _ = browser.wait();
            let mut err = String::new();
            let _ = browser.stderr.as_mut().unwrap().read_to_string(&mut err);
            panic!("the browser run failed: {err}");
        }
    };
    // The page on an idle cluster.
    let loaded = next_line(&mut browser);
    assert_eq!(loaded["stores"], 3, "{loaded}");
    assert_eq!(loaded["stores_up"], 3, "{loaded}");
    assert!(loaded["regions_drawn"].as_u64().unwrap() >= 12, "{loaded}");
    eprintln!(
        "console: first render {} ms after navigation",
        loaded["first_render_ms"]
    );
    // A query that only a cancel (or its 5-minute timeout) ends, however
    // fast or loaded the machine: a recursive CTE that counts up forever
    // from what the stores answer. (A nested-loop join of lineitem with
    // itself, "minutes long", took 45 s on an idle machine, and a loaded
    // browser was once slower.)
    let mut query = Command::new(QUARRY)
        .args(["sql", "--addr", &pg.compute])
        .arg(format!(
            "SET statement_timeout = '5min'; WITH RECURSIVE r(n) AS (SELECT count(*) FROM \
             lineitem UNION ALL SELECT n + 1 FROM r) SELECT count(*) AS {marker} FROM r"
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let result = next_line(&mut browser);
    let _ = browser.wait();
    assert_eq!(result["errors"], serde_json::json!([]), "{result}");
    assert_eq!(result["plan_shown"], true, "{result}");
    assert_eq!(result["cancelled"], true, "{result}");
    assert_eq!(result["charts"], 6, "{result}");
    assert!(shot.metadata().unwrap().len() > 10_000, "a screenshot");
    eprintln!("console: screenshot {}", shot.display());

    // The query's client heard the cancel (the query never ends by
    // itself).
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = query.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the cancelled query still runs");
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut err = String::new();
    query
        .stderr
        .as_mut()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!status.success());
    let id = result["query_id"].as_u64().unwrap();
    assert!(
        err.contains(&format!(
            "query {id} was cancelled by an operator (the compute process's console)"
        )),
        "{err}"
    );
    let (_, queries) = http(&pg.status_urls[3], "GET", "/api/queries", "");
    assert_eq!(queries.trim(), "[]");
}
