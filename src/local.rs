//! A local cluster of real processes: N storage processes and one compute
//! process on 127.0.0.1, each the `quarry` binary itself, for `playground`,
//! `bench` and the integration tests.
//!
//! Children first listen on port 0 and report their address on stdout
//! (`... listening on HOST:PORT`); the addresses are remembered in
//! `DIR/addresses` and reused when a child restarts, so the cluster's
//! address book stays valid. Logs go to `DIR/<name>.log`. Children are
//! started with `--exit-with-parent`, so they do not outlive a supervisor
//! that is killed. [`LocalCluster::stop`] sends SIGTERM and waits, then
//! SIGKILLs what did not stop.
//!
//! With [`ClusterArgs::netns`] each store runs in a network namespace of
//! its own on a bridge (`netns.rs`), at an address of its own, so that the
//! chaos nemesis can cut the network between processes; compute stays in
//! this process's namespace and reaches the stores over the bridge.

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
    /// Its status port's URL (`http://HOST:PORT`: `/metrics`), if any.
    pub status: Option<String>,
    /// A compute process's PostgreSQL address (`HOST:PORT`), if it serves one.
    pub postgres: Option<String>,
    /// The network namespace it runs in, if not this process's: its
    /// status port is on that namespace's loopback.
    pub namespace: Option<String>,
}

pub struct LocalCluster {
    pub dir: PathBuf,
    pub stores: Vec<Proc>,
    pub compute: Option<Proc>,
    /// More compute processes (e.g. one answering with rows on the wire).
    pub extra: Vec<Proc>,
    exe: PathBuf,
    store_args: Vec<String>,
    compute_args: Vec<String>,
    replicas: usize,
    /// How many stores share this machine (for their block caches).
    store_count: usize,
    /// The children run with TLS (their flags say where the certificates
    /// are): compute's URL is https.
    secure: bool,
    /// The stores' network namespaces, if they run in their own.
    pub netns: Option<crate::netns::Net>,
}

/// Extra arguments for the children.
#[derive(Debug, Clone)]
pub struct ClusterArgs {
    pub store: Vec<String>,
    pub compute: Vec<String>,
    /// Replicas per region (also passed to every store).
    pub replicas: usize,
    /// The `[security]` flags in `store` and `compute` turn on TLS.
    pub secure: bool,
    /// Each store in a network namespace of its own (needs root).
    pub netns: bool,
}

impl Default for ClusterArgs {
    fn default() -> Self {
        ClusterArgs {
            store: vec![],
            compute: vec![],
            replicas: 3,
            secure: false,
            netns: false,
        }
    }
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
    let (addr, status, postgres) = tokio::time::timeout(START_TIMEOUT, async {
        while let Some(line) = lines.next_line().await? {
            // "... listening on ADDR[ status URL][ postgres ADDR]"
            if let Some((_, rest)) = line.split_once("listening on ") {
                let mut words = rest.split_whitespace();
                let addr = words.next().unwrap_or_default().to_string();
                let (mut status, mut postgres) = (None, None);
                while let (Some(key), Some(value)) = (words.next(), words.next()) {
                    match key {
                        "status" => status = Some(value.to_string()),
                        "postgres" => postgres = Some(value.to_string()),
                        _ => {}
                    }
                }
                return Ok((addr, status, postgres));
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
        status,
        postgres,
        namespace: None,
    })
}

impl LocalCluster {
    /// Starts `stores` storage processes (store 1 bootstraps, the others
    /// join it) and a compute process, with data under `dir`. Reuses data
    /// already there.
    pub async fn start(dir: &Path, stores: usize, args: &ClusterArgs) -> Result<Self> {
        if stores == 0 {
            bail!("a cluster needs at least one store");
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let exe = std::env::current_exe().context("locating the quarry binary")?;
        let mut c = LocalCluster {
            dir: dir.to_path_buf(),
            stores: Vec::new(),
            compute: None,
            extra: Vec::new(),
            exe,
            store_args: args.store.clone(),
            compute_args: args.compute.clone(),
            replicas: args.replicas,
            store_count: stores,
            secure: args.secure,
            netns: None,
        };
        if args.netns {
            c.netns = Some(
                crate::netns::Net::new(stores)
                    .context("putting the stores in network namespaces")?,
            );
        }
        for id in 1..=stores as u64 {
            let p = c.start_store(id).await?;
            c.stores.push(p);
        }
        c.compute = Some(c.start_compute().await?);
        c.save_addresses()?;
        c.wait_meta_replicated(args.replicas.min(stores)).await?;
        Ok(c)
    }

    /// Waits until the meta region has its replicas, so that losing any
    /// one store afterwards keeps the cluster answering.
    async fn wait_meta_replicated(&self, replicas: usize) -> Result<()> {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let mut have = 0;
            for addr in self.store_addrs() {
                if let Ok(s) = crate::status::fetch(&addr).await {
                    let meta = s
                        .regions
                        .iter()
                        .filter_map(|r| r.region.as_ref())
                        .find(|r| r.id == 1);
                    have = have.max(meta.map_or(0, |r| r.peers.len()));
                }
            }
            if have >= replicas {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                bail!("the meta region has {have} of {replicas} replicas after 60 s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn addresses_file(&self) -> PathBuf {
        self.dir.join("addresses")
    }

    /// The address a child had last time, to start it there again.
    fn previous_addr(&self, name: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.addresses_file()).ok()?;
        text.lines()
            .filter_map(|l| l.rsplit_once(' '))
            .find(|(n, _)| *n == name)
            .map(|(_, a)| a.to_string())
    }

    fn save_addresses(&self) -> Result<()> {
        let mut text = String::new();
        for (i, s) in self.stores.iter().enumerate() {
            text.push_str(&format!("store-{} {}\n", i + 1, s.addr));
        }
        if let Some(c) = &self.compute {
            text.push_str(&format!("compute {}\n", c.addr));
            if let Some(pg) = &c.postgres {
                text.push_str(&format!("compute-postgres {pg}\n"));
            }
        }
        std::fs::write(self.addresses_file(), text).context("saving child addresses")
    }

    async fn start_store(&self, id: u64) -> Result<Proc> {
        let name = format!("store-{id}");
        let host = match &self.netns {
            Some(net) => net.addr(id as usize),
            None => "127.0.0.1".into(),
        };
        // A saved address on another host (a run with another network) is
        // not this store's any more.
        let addr = self
            .previous_addr(&name)
            .filter(|a| a.rsplit_once(':').is_some_and(|(h, _)| h == host))
            .unwrap_or_else(|| format!("{host}:0"));
        let mut args = vec![
            "storage".to_string(),
            "--store-id".into(),
            id.to_string(),
            "--addr".into(),
            addr,
            "--data-dir".into(),
            self.dir.join(&name).display().to_string(),
            // On the loopback of its namespace, if it has one: failpoints are
            // served to loopback only (`crate::netns::http`).
            "--status-addr".into(),
            "127.0.0.1:0".into(),
            "--exit-with-parent".into(),
        ];
        if self.netns.is_some() && !self.secure {
            // Not loopback: plaintext must be asked for.
            args.push("--insecure".into());
        }
        if id > 1 {
            let first = match self.stores.first() {
                Some(p) => p.addr.clone(),
                None => self
                    .previous_addr("store-1")
                    .ok_or_else(|| anyhow!("store 1 must start first"))?,
            };
            args.push("--join".into());
            args.push(first);
        }
        args.extend(["--replicas".to_string(), self.replicas.to_string()]);
        // The stores share this machine: 40% of its memory for their block
        // caches together (a flag in store_args, later, wins).
        if let Some(mem) = quarry_raftstore::config::total_memory_bytes() {
            let share = (mem as f64 * 0.4 / self.store_count.max(1) as f64) as u64 >> 20;
            args.extend(["--block-cache-mb".to_string(), share.max(64).to_string()]);
        }
        args.extend(self.store_args.iter().cloned());
        let (exe, args) = match &self.netns {
            // `ip netns exec` execs the binary in place: the child's pid is
            // the store's, for signals.
            Some(net) => {
                let mut all = vec![
                    "netns".to_string(),
                    "exec".into(),
                    net.namespace(id as usize),
                    self.exe.display().to_string(),
                ];
                all.extend(args);
                (PathBuf::from("ip"), all)
            }
            None => (self.exe.clone(), args),
        };
        let mut p = spawn(
            &exe,
            &format!("storage {id}"),
            &args,
            &self.dir.join(format!("{name}.log")),
        )
        .await?;
        p.namespace = self.netns.as_ref().map(|n| n.namespace(id as usize));
        Ok(p)
    }

    async fn start_compute(&self) -> Result<Proc> {
        let addr = self
            .previous_addr("compute")
            .unwrap_or_else(|| "127.0.0.1:0".into());
        let pg_addr = self
            .previous_addr("compute-postgres")
            .unwrap_or_else(|| "127.0.0.1:0".into());
        let mut args = vec![
            "compute".to_string(),
            "--addr".into(),
            addr,
            "--pg-addr".into(),
            pg_addr,
            "--stores".into(),
            self.store_addrs().join(","),
            "--status-addr".into(),
            "127.0.0.1:0".into(),
            "--exit-with-parent".into(),
        ];
        args.extend(self.compute_args.iter().cloned());
        spawn(&self.exe, "compute", &args, &self.dir.join("compute.log")).await
    }

    /// Starts one more compute process over the same stores, with `args`
    /// added; returns its URL. It stops with the cluster.
    pub async fn start_extra_compute(&mut self, name: &str, args: &[String]) -> Result<String> {
        let mut all = vec![
            "compute".to_string(),
            "--addr".into(),
            "127.0.0.1:0".into(),
            "--stores".into(),
            self.store_addrs().join(","),
            "--status-addr".into(),
            "127.0.0.1:0".into(),
            "--exit-with-parent".into(),
        ];
        all.extend(self.compute_args.iter().cloned());
        all.extend(args.iter().cloned());
        let p = spawn(&self.exe, name, &all, &self.dir.join(format!("{name}.log"))).await?;
        let url = format!("{}://{}", self.scheme(), p.addr);
        self.extra.push(p);
        Ok(url)
    }

    /// Children that have exited: (index of a store or None for compute,
    /// exit status).
    pub fn exited(&mut self) -> Vec<(Option<usize>, String)> {
        let mut out = Vec::new();
        for (i, s) in self.stores.iter_mut().enumerate() {
            if let Ok(Some(st)) = s.child.try_wait() {
                out.push((Some(i), st.to_string()));
            }
        }
        if let Some(c) = self.compute.as_mut() {
            if let Ok(Some(st)) = c.child.try_wait() {
                out.push((None, st.to_string()));
            }
        }
        out
    }

    /// Starts a child again that has exited (store `Some(index)` or
    /// compute), at its old address.
    pub async fn restart(&mut self, which: Option<usize>) -> Result<&Proc> {
        match which {
            Some(i) => {
                let p = self.start_store(i as u64 + 1).await?;
                self.stores[i] = p;
                Ok(&self.stores[i])
            }
            None => {
                let p = self.start_compute().await?;
                self.compute = Some(p);
                Ok(self.compute.as_ref().expect("just set"))
            }
        }
    }

    /// Every child running now: (name, pid), stores first.
    pub fn processes(&self) -> Vec<(String, u32)> {
        self.stores
            .iter()
            .chain(&self.compute)
            .chain(&self.extra)
            .map(|p| (p.name.clone(), p.pid))
            .collect()
    }

    pub fn store_addrs(&self) -> Vec<String> {
        self.stores.iter().map(|p| p.addr.clone()).collect()
    }

    pub fn compute_url(&self) -> String {
        format!(
            "{}://{}",
            self.scheme(),
            self.compute.as_ref().map(|c| c.addr.as_str()).unwrap_or("")
        )
    }

    fn scheme(&self) -> &'static str {
        match self.secure {
            true => "https",
            false => "http",
        }
    }

    /// Stops every child: SIGTERM, a grace period, then SIGKILL.
    pub async fn stop(&mut self) {
        let mut procs: Vec<&mut Proc> = self.compute.iter_mut().collect();
        procs.extend(self.extra.iter_mut());
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

/// Where a bench's clients connect: a running compute process (`--addr`),
/// or an embedded cluster in a temporary directory, stopped by
/// [`BenchTarget::close`].
pub struct BenchTarget {
    pub url: String,
    pub cluster: Option<LocalCluster>,
    _dir: tempfile::TempDir,
}

impl BenchTarget {
    /// `addr`, or a new embedded cluster of `stores` stores (its directory
    /// named after `prefix`).
    pub async fn open(addr: Option<&str>, stores: usize, prefix: &str) -> Result<Self> {
        Self::open_with(addr, stores, prefix, &ClusterArgs::default()).await
    }

    /// [`BenchTarget::open`], the embedded cluster started with `args`.
    pub async fn open_with(
        addr: Option<&str>,
        stores: usize,
        prefix: &str,
        args: &ClusterArgs,
    ) -> Result<Self> {
        let dir = tempfile::Builder::new().prefix(prefix).tempdir()?;
        let (url, cluster) = match addr {
            Some(a) => (a.to_string(), None),
            None => {
                let c = LocalCluster::start(dir.path(), stores, args).await?;
                (c.compute_url(), Some(c))
            }
        };
        Ok(BenchTarget {
            url,
            cluster,
            _dir: dir,
        })
    }

    /// Stops the embedded cluster, if any.
    pub async fn close(&mut self) {
        if let Some(c) = self.cluster.as_mut() {
            c.stop().await;
        }
    }
}
