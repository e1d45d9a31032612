//! A local cluster of real processes: N storage processes and one compute
//! process on 127.0.0.1, each the `quarry` binary itself, for `playground`,
//! `bench` and the integration tests.
//!
//! Children listen on port 0 and report their address on stdout
//! (`... listening on HOST:PORT`); their logs go to `DIR/<name>.log`. They
//! are started with `--exit-with-parent`, so they do not outlive a
//! supervisor that is killed. [`LocalCluster::stop`] sends SIGTERM and
//! waits, then SIGKILLs what did not stop.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// One child process.
pub struct Proc {
    pub name: String,
    pub child: Child,
    pub pid: u32,
    pub addr: String,
}

pub struct LocalCluster {
    pub dir: PathBuf,
    pub stores: Vec<Proc>,
    pub compute: Option<Proc>,
    exe: PathBuf,
}

/// How long a child may take to report its address.
const START_TIMEOUT: Duration = Duration::from_secs(60);

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}

/// Starts `exe args...`, waits for its "listening on ADDR" line.
pub async fn spawn(exe: &Path, name: &str, args: &[String], log: &Path) -> Result<Proc> {
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    let mut child = Command::new(exe)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log_file))
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {name}"))?;
    let pid = child.id().ok_or_else(|| anyhow!("{name} exited at once"))?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut lines = BufReader::new(stdout).lines();
    let addr = tokio::time::timeout(START_TIMEOUT, async {
        while let Some(line) = lines.next_line().await? {
            if let Some((_, addr)) = line.split_once("listening on ") {
                return Ok(addr.trim().to_string());
            }
        }
        Err(anyhow!("{name} exited before it was ready"))
    })
    .await
    .map_err(|_| anyhow!("{name} did not start within {START_TIMEOUT:?}"))
    .and_then(|r| r)
    .map_err(|e| anyhow!("{e}; last log lines of {}:\n{}", log.display(), tail(log)))?;
    // Keep draining stdout so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(Proc {
        name: name.to_string(),
        child,
        pid,
        addr,
    })
}

impl LocalCluster {
    /// Starts `stores` storage processes (store 1 bootstraps, the others
    /// join it) and a compute process, with data under `dir`. Reuses data
    /// already there.
    pub async fn start(dir: &Path, stores: usize, compute_args: &[String]) -> Result<Self> {
        if stores == 0 {
            bail!("a cluster needs at least one store");
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let exe = std::env::current_exe().context("locating the quarry binary")?;
        let mut c = LocalCluster {
            dir: dir.to_path_buf(),
            stores: Vec::new(),
            compute: None,
            exe,
        };
        for id in 1..=stores as u64 {
            let p = c.start_store(id).await?;
            c.stores.push(p);
        }
        let mut args = vec![
            "compute".to_string(),
            "--addr".into(),
            "127.0.0.1:0".into(),
            "--stores".into(),
            c.store_addrs().join(","),
            "--exit-with-parent".into(),
        ];
        args.extend(compute_args.iter().cloned());
        let p = spawn(&c.exe, "compute", &args, &dir.join("compute.log")).await?;
        c.compute = Some(p);
        Ok(c)
    }

    async fn start_store(&self, id: u64) -> Result<Proc> {
        let mut args = vec![
            "storage".to_string(),
            "--store-id".into(),
            id.to_string(),
            "--addr".into(),
            "127.0.0.1:0".into(),
            "--data-dir".into(),
            self.dir.join(format!("store-{id}")).display().to_string(),
            "--exit-with-parent".into(),
        ];
        if id > 1 {
            let first = self
                .stores
                .first()
                .ok_or_else(|| anyhow!("store 1 must start first"))?;
            args.push("--join".into());
            args.push(first.addr.clone());
        }
        spawn(
            &self.exe,
            &format!("storage {id}"),
            &args,
            &self.dir.join(format!("store-{id}.log")),
        )
        .await
    }

    pub fn store_addrs(&self) -> Vec<String> {
        self.stores.iter().map(|p| p.addr.clone()).collect()
    }

    pub fn compute_url(&self) -> String {
        format!(
            "http://{}",
            self.compute.as_ref().map(|c| c.addr.as_str()).unwrap_or("")
        )
    }

    /// Stops every child: SIGTERM, a grace period, then SIGKILL.
    pub async fn stop(&mut self) {
        let mut procs: Vec<&mut Proc> = self.compute.iter_mut().collect();
        procs.extend(self.stores.iter_mut().rev());
        for p in &procs {
            let _ = kill(Pid::from_raw(p.pid as i32), Signal::SIGTERM);
        }
        for p in procs {
            match tokio::time::timeout(Duration::from_secs(10), p.child.wait()).await {
                Ok(_) => {}
                Err(_) => {
                    tracing::warn!("{} did not stop on SIGTERM; killing it", p.name);
                    let _ = p.child.kill().await;
                }
            }
        }
    }
}
