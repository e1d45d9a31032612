//! Machines on one switch, made of network namespaces: each node (a
//! storage process) runs in a namespace of its own, joined by a veth link
//! to a bridge in the caller's namespace, where compute and the tools
//! run. Packets between nodes, and between compute and a node, cross the
//! bridge as they would cross a switch, so the network itself can fail
//! them: a link set down drops every packet to and from its node without
//! a word (no reset, no refused connection: a pulled cable), and a
//! blackhole route drops what one namespace sends to one address.
//!
//! This is what `quarry chaos --netns` partitions with, and what
//! `tests/netns_partition.rs` runs its stores in. It needs root (or
//! CAP_NET_ADMIN) and `ip` from iproute2; [`Net::new`] says why when the
//! machine does not allow it, and a bridge whose traffic the host filters
//! (Docker's `br_netfilter` with a dropping FORWARD chain) counts as not
//! allowed.
//!
//! TCP needs packets both ways, so a route that drops only what node A
//! sends to node B (a one-way cut) still breaks every connection between
//! them, whichever side opened it; what stays one-way is which side
//! notices first. The machine has no iptables or nftables to drop by
//! connection state, and `tc netem` does not work here.
//!
//! A process in a namespace serves its status port on that namespace's
//! loopback (failpoints are served to loopback only); [`http`] talks to
//! it from a thread that enters the namespace.
//!
//! Every name carries the owner's pid (the bridge `qbrPID`, the
//! namespaces `quarry-PID-sN`, the links `qvPIDsN`, a /24 of the
//! benchmarking range 198.18.0.0/15 picked by the pid), and all of it is
//! removed on drop; leftovers of an owner that died without dropping (a
//! SIGKILL) are removed by the next [`Net::new`].

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::process::Command;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};

/// Runs `ip ARGS`; its error output on failure.
fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running ip (iproute2)")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Nodes one network holds (addresses .11 to .74 of its /24).
const MAX_NODES: u32 = 64;

/// A route that drops packets: in a node's namespace (`Some(n)`) or the
/// owner's (`None`), to an address.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Blackhole {
    from: Option<usize>,
    to: String,
}

/// A bridge and `nodes` namespaces on it, removed on drop.
pub struct Net {
    pid: u32,
    nodes: usize,
    /// The /24 this network uses: `198.A.B`.
    prefix: String,
    /// Nodes whose link is down.
    down: BTreeSet<usize>,
    blackholes: BTreeSet<Blackhole>,
}

impl Net {
    /// Builds the network of `nodes` nodes (numbered from 1), or says why
    /// the machine does not allow it.
    pub fn new(nodes: usize) -> Result<Net> {
        if nodes as u32 > MAX_NODES {
            bail!("at most {MAX_NODES} nodes on one bridge");
        }
        remove_leftovers();
        let pid = std::process::id();
        let mut net = Net {
            pid,
            nodes: 0,
            prefix: format!("198.{}.{}", 18 + (pid >> 8) % 2, pid & 0xff),
            down: BTreeSet::new(),
            blackholes: BTreeSet::new(),
        };
        // Another owner whose pid shares the /24 would share its routes.
        let routed = Command::new("ip")
            .args(["route", "show", &format!("{}.0/24", net.prefix)])
            .output()
            .context("running ip (iproute2)")?;
        if !routed.stdout.is_empty() {
            bail!(
                "{}.0/24 is in use already: {}",
                net.prefix,
                String::from_utf8_lossy(&routed.stdout).trim()
            );
        }
        let bridge = net.bridge();
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        ip(&[
            "addr",
            "add",
            &format!("{}.1/24", net.prefix),
            "dev",
            &bridge,
        ])?;
        ip(&["link", "set", &bridge, "up"])?;
        for n in 1..=nodes {
            let ns = net.namespace(n);
            ip(&["netns", "add", &ns])?;
            net.nodes = n;
            let link = net.link(n);
            ip(&[
                "link", "add", &link, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ])?;
            ip(&["link", "set", &link, "master", &bridge])?;
            ip(&["link", "set", &link, "up"])?;
            let addr = format!("{}/24", net.addr(n));
            ip(&[
                "netns", "exec", &ns, "ip", "addr", "add", &addr, "dev", "eth0",
            ])?;
            ip(&["netns", "exec", &ns, "ip", "link", "set", "eth0", "up"])?;
            ip(&["netns", "exec", &ns, "ip", "link", "set", "lo", "up"])?;
        }
        if nodes > 1 {
            net.probe(1, 2)?;
        }
        Ok(net)
    }

    /// Whether node `from` reaches node `to` over the bridge: a connection
    /// to a closed port there is refused at once, where a filtered bridge
    /// lets it time out.
    fn probe(&self, from: usize, to: usize) -> Result<()> {
        let connect = format!("exec 3<>/dev/tcp/{}/9", self.addr(to));
        let ns = self.namespace(from);
        let out = Command::new("timeout")
            .args(["3", "ip", "netns", "exec", &ns, "bash", "-c", &connect])
            .output()
            .context("running timeout")?;
        let err = String::from_utf8_lossy(&out.stderr);
        if !err.contains("refused") {
            bail!(
                "namespace {from} cannot reach namespace {to} over the bridge (the host may \
                 filter bridged traffic): {}",
                err.trim()
            );
        }
        Ok(())
    }

    pub fn nodes(&self) -> usize {
        self.nodes
    }

    fn bridge(&self) -> String {
        format!("qbr{}", self.pid)
    }

    /// Node `n`'s namespace: run a process in it with
    /// `ip netns exec NAMESPACE PROGRAM ARGS`.
    pub fn namespace(&self, n: usize) -> String {
        format!("quarry-{}-s{n}", self.pid)
    }

    /// The bridge's end of node `n`'s link.
    fn link(&self, n: usize) -> String {
        format!("qv{}s{n}", self.pid)
    }

    /// Node `n`'s address (no port).
    pub fn addr(&self, n: usize) -> String {
        format!("{}.{}", self.prefix, 10 + n)
    }

    fn check(&self, n: usize) -> Result<()> {
        match (1..=self.nodes).contains(&n) {
            true => Ok(()),
            false => Err(anyhow!("no node {n} (nodes 1 to {})", self.nodes)),
        }
    }

    /// Node `n` loses its link: no packet to or from it, from anyone.
    pub fn cut(&mut self, n: usize) -> Result<()> {
        self.check(n)?;
        ip(&["link", "set", &self.link(n), "down"])?;
        self.down.insert(n);
        Ok(())
    }

    /// Node `n`'s link comes back.
    pub fn heal(&mut self, n: usize) -> Result<()> {
        self.check(n)?;
        ip(&["link", "set", &self.link(n), "up"])?;
        self.down.remove(&n);
        Ok(())
    }

    /// What node `from` sends to node `to` is dropped (`from` None: what
    /// the owner's namespace, compute's, sends).
    pub fn drop_packets(&mut self, from: Option<usize>, to: usize) -> Result<()> {
        self.check(to)?;
        if let Some(f) = from {
            self.check(f)?;
        }
        let hole = Blackhole {
            from,
            to: format!("{}/32", self.addr(to)),
        };
        if self.blackholes.contains(&hole) {
            return Ok(());
        }
        self.route(&hole, "add")?;
        self.blackholes.insert(hole);
        Ok(())
    }

    /// Nodes `a` and `b` cannot reach each other, both ways.
    pub fn split_pair(&mut self, a: usize, b: usize) -> Result<()> {
        self.drop_packets(Some(a), b)?;
        self.drop_packets(Some(b), a)
    }

    /// Every route [`Net::drop_packets`] added is removed.
    /// One that could not be removed stays on the list, for a later try.
    pub fn heal_routes(&mut self) -> Result<()> {
        let mut first_error = None;
        for hole in std::mem::take(&mut self.blackholes) {
            if let Err(e) = self.route(&hole, "del") {
                first_error.get_or_insert(e);
                self.blackholes.insert(hole);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Adds or deletes a blackhole route (`op` "add" or "del").
    fn route(&self, hole: &Blackhole, op: &str) -> Result<()> {
        match hole.from {
            Some(n) => ip(&[
                "netns",
                "exec",
                &self.namespace(n),
                "ip",
                "route",
                op,
                "blackhole",
                &hole.to,
            ]),
            None => ip(&["route", op, "blackhole", &hole.to]),
        }
    }

    /// Every cut healed: links up, routes removed. What could not be
    /// healed stays on the lists, for a later try.
    pub fn heal_all(&mut self) -> Result<()> {
        let mut result = self.heal_routes();
        for n in self.down.clone() {
            if let Err(e) = self.heal(n) {
                result = result.and(Err(e));
            }
        }
        result
    }
}

impl Drop for Net {
    /// Never panics: it may run while a failed assertion unwinds.
    fn drop(&mut self) {
        let _ = self.heal_routes();
        let _ = ip(&["link", "del", &self.bridge()]);
        for n in 1..=self.nodes {
            let _ = ip(&["netns", "del", &self.namespace(n)]);
        }
    }
}

/// Removes the namespaces and bridges of owners that are gone (killed
/// before they could drop their [`Net`]).
fn remove_leftovers() {
    let alive = |pid: &str| std::path::Path::new(&format!("/proc/{pid}")).exists();
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    let mut owners = BTreeSet::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let Some(rest) = name.strip_prefix("quarry-") else {
            continue;
        };
        let Some((pid, _)) = rest.split_once("-s") else {
            continue;
        };
        if pid.chars().all(|c| c.is_ascii_digit()) && !alive(pid) {
            let _ = ip(&["netns", "del", name]);
            owners.insert(pid.to_string());
        }
    }
    for pid in owners {
        let _ = ip(&["link", "del", &format!("qbr{pid}")]);
    }
    // Compute's blackholes of a dead owner stay in this namespace's table:
    // any to the range whose /24 no bridge serves any more.
    let Ok(out) = Command::new("ip").args(["route", "show"]).output() else {
        return;
    };
    let table = String::from_utf8_lossy(&out.stdout);
    let served: BTreeSet<&str> = table
        .lines()
        .filter(|l| l.contains(" dev qbr"))
        .filter_map(|l| {
            l.split_whitespace()
                .next()?
                .rsplit_once('.')
                .map(|(p, _)| p)
        })
        .collect();
    for line in table.lines() {
        let mut words = line.split_whitespace();
        let (Some("blackhole"), Some(to)) = (words.next(), words.next()) else {
            continue;
        };
        // Only a node's address as this module numbers them (.11 up).
        let in_range = to.starts_with("198.18.") || to.starts_with("198.19.");
        let Some((prefix, host)) = to.trim_end_matches("/32").rsplit_once('.') else {
            continue;
        };
        let node = host
            .parse::<u32>()
            .is_ok_and(|h| (11..=10 + MAX_NODES).contains(&h));
        if in_range && node && !served.contains(prefix) {
            let _ = ip(&["route", "del", "blackhole", to]);
        }
    }
    // The kernel removes a deleted namespace's end of each veth pair, and
    // with it the bridge's end, shortly after.
    std::thread::sleep(Duration::from_millis(50));
}

/// Sends `request` (a whole HTTP/1.1 request with `Connection: close`) to
/// `host` (`IP:PORT`) from inside network namespace `namespace`, and
/// answers the whole response. A thread of its own enters the namespace
/// (a namespace is per thread) and ends with the exchange, so no other
/// thread's sockets move; bounded by `timeout`.
pub async fn http(
    namespace: &str,
    host: &str,
    request: Vec<u8>,
    timeout: Duration,
) -> Result<String> {
    let path = format!("/var/run/netns/{namespace}");
    let addr: std::net::SocketAddr = host
        .parse()
        .with_context(|| format!("{host} is not IP:PORT"))?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("netns-http".into())
        .spawn(move || {
            let exchange = || -> Result<String> {
                let ns = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
                nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
                    .with_context(|| format!("entering network namespace {path}"))?;
                let mut s = std::net::TcpStream::connect_timeout(&addr, timeout)?;
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))?;
                s.write_all(&request)?;
                let mut text = String::new();
                s.read_to_string(&mut text)?;
                Ok(text)
            };
            let _ = tx.send(exchange());
        })
        .context("starting a thread")?;
    rx.await
        .map_err(|_| anyhow!("the thread talking to {host} in {namespace} died"))?
        .with_context(|| format!("talking to {host} in network namespace {namespace}"))
}
