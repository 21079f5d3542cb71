//! [`RedisCluster`]: a real Redis Cluster of `redis-server` processes on free ports of 127.0.0.1,
//! made with `redis-cli --cluster create`, in a temporary directory, killed and removed on drop.
//!
//! Nodes can be killed (SIGKILL) one at a time, and a test can wait until the cluster has
//! failed a killed master over to its replica. Nodes run without persistence and with a
//! `cluster-node-timeout` of one second, so a failover takes a few seconds.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use fencelock_servers::port::free_port;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const INSTALL_HINT: &str = "a Redis Cluster test needs `redis-server` and `redis-cli` on PATH \
                            (Debian: apt-get install redis-server, which ships both)";
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// `cluster-node-timeout`: how long a master may be silent before its replica takes over.
const NODE_TIMEOUT_MS: u64 = 1000;

/// One node: its port, its directory and its process.
struct Node {
    port: u16,
    dir: PathBuf,
    child: Mutex<Option<Child>>,
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl Node {
    fn child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One line of `CLUSTER NODES`, as seen by a live node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    /// The node's id.
    pub id: String,
    /// The node's port on 127.0.0.1.
    pub port: u16,
    /// The id of the master it replicates (replicas only).
    pub replica_of: Option<String>,
    /// Whether it is a master (else a replica).
    pub master: bool,
    /// Whether the cluster considers it failed (`fail` flag).
    pub failed: bool,
    /// The slot ranges it serves (masters only), inclusive.
    pub slots: Vec<(u16, u16)>,
}

/// A Redis Cluster owned by a test. Dropping it kills every node and removes the directory.
///
/// ```no_run
/// use std::time::Duration;
/// use fencelock_redis::servers::RedisCluster;
/// let cluster = RedisCluster::spawn(3, 1);   // three masters, one replica each: six nodes
/// let url = cluster.url();                   // redis+cluster://127.0.0.1:<p1>,...
/// let master = cluster.master_of_slot(0);    // the node index serving slot 0
/// cluster.kill(master);                      // SIGKILL
/// let promoted = cluster.await_failover(master, Duration::from_secs(30)); // its replica
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<Node>,
    dir: tempfile::TempDir,
}

impl RedisCluster {
    /// `masters` masters with `replicas` replicas each (`masters * (1 + replicas)` nodes),
    /// the 16384 slots spread over the masters, waited for until every node reports
    /// `cluster_state:ok`.
    ///
    /// # Panics
    /// If `redis-server` or `redis-cli` is missing or the cluster does not form, with a
    /// message saying what to install.
    pub fn spawn(masters: usize, replicas: usize) -> Self {
        match Self::try_spawn(masters, replicas) {
            Ok(cluster) => cluster,
            Err(e) => panic!("cannot start a Redis Cluster: {e}"),
        }
    }

    /// [`spawn`](Self::spawn), reporting failures. A missing binary is an
    /// [`io::ErrorKind::NotFound`] error that says what to install.
    pub fn try_spawn(masters: usize, replicas: usize) -> io::Result<Self> {
        if masters < 3 {
            return Err(io::Error::other(
                "redis-cli --cluster create needs at least three masters",
            ));
        }
        let mut last_error = None;
        // A free port can be taken between probing and binding; try a few times.
        for _ in 0..3 {
            let cluster = Self::prepare(masters * (1 + replicas))?;
            match cluster.start_all().and_then(|()| cluster.create(replicas)) {
                Ok(()) => return Ok(cluster),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(e),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("the Redis Cluster did not form")))
    }

    fn prepare(count: usize) -> io::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("fencelock-redis-cluster-")
            .tempdir()?;
        let mut nodes: Vec<Node> = Vec::with_capacity(count);
        while nodes.len() < count {
            let port = free_port()?;
            // A probed port is free again at once, so the same one can come back: each node
            // needs its own (and its own directory, named after it).
            if nodes.iter().any(|node| node.port == port) {
                continue;
            }
            let node_dir = dir.path().join(port.to_string());
            std::fs::create_dir(&node_dir)?;
            nodes.push(Node {
                port,
                dir: node_dir,
                child: Mutex::new(None),
            });
        }
        Ok(RedisCluster { nodes, dir })
    }

    fn start_all(&self) -> io::Result<()> {
        for index in 0..self.nodes.len() {
            self.launch(index)?;
        }
        let deadline = Instant::now() + START_TIMEOUT;
        for index in 0..self.nodes.len() {
            self.await_answer(index, deadline)?;
        }
        Ok(())
    }

    /// `redis-cli --cluster create`, then waits until every node says the cluster is ok, sees
    /// every other node, and sees each master serving slots with its `replicas` replicas.
    fn create(&self, replicas: usize) -> io::Result<()> {
        let mut command = Command::new("redis-cli");
        command.arg("--cluster").arg("create");
        for node in &self.nodes {
            command.arg(format!("127.0.0.1:{}", node.port));
        }
        command
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null());
        let output = command.output().map_err(not_found)?;
        if !output.status.success() {
            return Err(io::Error::other(format!(
                "redis-cli --cluster create failed with {}: {}",
                output.status,
                tail(&String::from_utf8_lossy(&output.stdout))
            )));
        }
        let deadline = Instant::now() + START_TIMEOUT;
        for index in 0..self.nodes.len() {
            loop {
                let ready = self.cli(index, &["CLUSTER", "INFO"]).is_ok_and(|info| {
                    info.contains("cluster_state:ok")
                        && info.contains(&format!("cluster_known_nodes:{}", self.nodes.len()))
                });
                // Every master serving slots is seen with all of its replicas: gossip that a
                // node is a replica can lag behind `cluster_state:ok` on a loaded machine, and
                // a client connecting then would take the cluster for one without replicas.
                let agrees = ready
                    && self.try_nodes(index).is_ok_and(|view| {
                        let masters: Vec<&NodeView> = view
                            .iter()
                            .filter(|n| n.master && !n.slots.is_empty())
                            .collect();
                        !masters.is_empty()
                            && masters.iter().all(|master| {
                                view.iter()
                                    .filter(|n| {
                                        !n.failed && n.replica_of.as_deref() == Some(&master.id)
                                    })
                                    .count()
                                    >= replicas
                            })
                    });
                if agrees {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "node on port {} did not report cluster_state:ok within \
                             {START_TIMEOUT:?}: {}",
                            self.nodes[index].port,
                            self.log_tail(index)
                        ),
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }

    /// `redis+cluster://127.0.0.1:<p1>,127.0.0.1:<p2>,...`: every node, as seed nodes.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// The nodes' ports, in the order of [`url`](Self::url).
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// The number of nodes, replicas included.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always false: a cluster has at least three nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Whether node `index`'s process is running.
    pub fn is_running(&self, index: usize) -> bool {
        self.nodes[index]
            .child()
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Kills node `index` with SIGKILL and waits for it to exit. Nothing is flushed.
    pub fn kill(&self, index: usize) {
        if let Some(mut child) = self.nodes[index].child().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes node `index` with SIGSTOP: its connections stay open, nothing is answered or
    /// read (a replica takes in no replication stream).
    ///
    /// # Panics
    /// If the signal cannot be sent.
    pub fn pause(&self, index: usize) {
        self.signal(index, Signal::SIGSTOP);
    }

    /// Resumes node `index` after [`pause`](Self::pause).
    ///
    /// # Panics
    /// If the signal cannot be sent.
    pub fn resume(&self, index: usize) {
        self.signal(index, Signal::SIGCONT);
    }

    fn signal(&self, index: usize, signal: Signal) {
        let node = &self.nodes[index];
        let Some(pid) = node.child().as_ref().map(Child::id) else {
            return;
        };
        let sent = i32::try_from(pid)
            .map_err(|e| e.to_string())
            .and_then(|pid| kill(Pid::from_raw(pid), signal).map_err(|e| e.to_string()));
        if let Err(e) = sent {
            panic!(
                "cannot send {signal} to redis-server on port {}: {e}",
                node.port
            );
        }
    }

    /// The node id of node `index` (`CLUSTER MYID`).
    ///
    /// # Panics
    /// If the node does not answer.
    pub fn id(&self, index: usize) -> String {
        match self.cli(index, &["CLUSTER", "MYID"]) {
            Ok(id) => id.trim().to_owned(),
            Err(e) => panic!("{e}"),
        }
    }

    /// The slot of `key` (`CLUSTER KEYSLOT`, asked of the first live node).
    ///
    /// # Panics
    /// If no node answers.
    pub fn key_slot(&self, key: &str) -> u16 {
        let reply = (0..self.nodes.len())
            .filter(|&i| self.is_running(i))
            .find_map(|i| self.cli(i, &["CLUSTER", "KEYSLOT", key]).ok());
        match reply.and_then(|r| r.trim().parse().ok()) {
            Some(slot) => slot,
            None => panic!("no node answered CLUSTER KEYSLOT {key}"),
        }
    }

    /// The index of a replica of master `master`, as the master sees it.
    ///
    /// # Panics
    /// If the master does not answer.
    pub fn replica_of(&self, master: usize) -> Option<usize> {
        let id = self.id(master);
        self.nodes(master)
            .into_iter()
            .find(|n| n.replica_of.as_deref() == Some(id.as_str()) && !n.failed)
            .and_then(|n| self.index_of(n.port))
    }

    /// Waits until every replica connected to master `master` has acknowledged all of its
    /// replication stream (`INFO replication`: each `slaveN` offset equals
    /// `master_repl_offset`).
    ///
    /// # Panics
    /// If that does not happen within `limit`.
    pub fn await_replicated(&self, master: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let info = self
                .cli(master, &["INFO", "replication"])
                .unwrap_or_default();
            let offset = info
                .lines()
                .find_map(|l| l.trim().strip_prefix("master_repl_offset:"))
                .and_then(|v| v.parse::<u64>().ok());
            let replicas: Vec<Option<u64>> = info
                .lines()
                .filter(|l| l.starts_with("slave") && l.contains("offset="))
                .map(|l| {
                    l.split(',')
                        .find_map(|f| f.strip_prefix("offset="))
                        .and_then(|v| v.parse().ok())
                })
                .collect();
            if offset.is_some() && !replicas.is_empty() && replicas.iter().all(|r| *r == offset) {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "the replicas of the master on port {} did not catch up within {limit:?}: {}",
                    self.nodes[master].port,
                    info.trim()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills every node.
    pub fn kill_all(&self) {
        for index in 0..self.nodes.len() {
            self.kill(index);
        }
    }

    /// `redis-cli -p <port of node index> <args>`: the reply as text, or an error naming the
    /// node when redis-cli fails or the server answers an error.
    pub fn cli(&self, index: usize, args: &[&str]) -> io::Result<String> {
        let port = self.nodes[index].port;
        let output = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(not_found)?;
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        if !output.status.success() || text.starts_with("ERR") || text.starts_with("MOVED") {
            return Err(io::Error::other(format!(
                "redis-cli -p {port} {}: {}{}",
                args.join(" "),
                text.trim(),
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        Ok(text)
    }

    /// The cluster as node `index` sees it (`CLUSTER NODES`).
    ///
    /// # Panics
    /// If the node does not answer.
    pub fn nodes(&self, index: usize) -> Vec<NodeView> {
        match self.try_nodes(index) {
            Ok(view) => view,
            Err(e) => panic!("{e}"),
        }
    }

    fn try_nodes(&self, index: usize) -> io::Result<Vec<NodeView>> {
        let text = self.cli(index, &["CLUSTER", "NODES"])?;
        Ok(text.lines().filter_map(parse_node_line).collect())
    }

    /// The index of the node `port` names.
    fn index_of(&self, port: u16) -> Option<usize> {
        self.nodes.iter().position(|n| n.port == port)
    }

    /// The index of the live master serving `slot`, as the first live node sees it.
    ///
    /// # Panics
    /// If no live node answers or none serves the slot.
    pub fn master_of_slot(&self, slot: u16) -> usize {
        let observer = (0..self.nodes.len())
            .find(|&i| self.is_running(i))
            .unwrap_or_else(|| panic!("every node of the cluster is down"));
        serving(&self.nodes(observer), slot)
            .and_then(|port| self.index_of(port))
            .unwrap_or_else(|| panic!("no live master serves slot {slot}"))
    }

    /// Waits until a replica of master `killed` has taken over its slots: every live node
    /// reports `cluster_state:ok` and names the same live master for the first slot the
    /// killed node served. Returns that master's index.
    ///
    /// # Panics
    /// If that does not happen within `limit`.
    pub fn await_failover(&self, killed: usize, limit: Duration) -> usize {
        let deadline = Instant::now() + limit;
        let port = self.nodes[killed].port;
        let slot = self
            .own_slots(killed)
            .first()
            .map(|&(first, _)| first)
            .unwrap_or_else(|| panic!("node on port {port} served no slot: it was no master"));
        loop {
            let live: Vec<usize> = (0..self.nodes.len())
                .filter(|&i| i != killed && self.is_running(i))
                .collect();
            let chosen: Vec<Option<u16>> = live
                .iter()
                .map(|&i| {
                    let ok = self
                        .cli(i, &["CLUSTER", "INFO"])
                        .is_ok_and(|info| info.contains("cluster_state:ok"));
                    let view = self.try_nodes(i).ok()?;
                    ok.then(|| serving(&view, slot))
                        .flatten()
                        .filter(|&p| p != port)
                })
                .collect();
            if let Some(Some(first)) = chosen.first()
                && chosen.iter().all(|c| *c == Some(*first))
                && let Some(index) = self.index_of(*first)
            {
                return index;
            }
            if Instant::now() >= deadline {
                panic!(
                    "master on port {port} was not failed over within {limit:?} (the live \
                     nodes name these masters for slot {slot}: {chosen:?})"
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The slots node `index` served when it last wrote its `nodes.conf` (for a killed
    /// master: the slots it had).
    fn own_slots(&self, index: usize) -> Vec<(u16, u16)> {
        let config =
            std::fs::read_to_string(self.nodes[index].dir.join("nodes.conf")).unwrap_or_default();
        config
            .lines()
            .filter(|line| line.contains("myself"))
            .find_map(parse_node_line)
            .map(|n| n.slots)
            .unwrap_or_default()
    }

    /// The last lines of node `index`'s log, for failure messages.
    pub fn log_tail(&self, index: usize) -> String {
        tail(&std::fs::read_to_string(self.nodes[index].dir.join("redis.log")).unwrap_or_default())
    }

    fn launch(&self, index: usize) -> io::Result<()> {
        let node = &self.nodes[index];
        let child = Command::new("redis-server")
            .arg("--port")
            .arg(node.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no", "--protected-mode", "no"])
            .args(["--loglevel", "warning"])
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-config-file", "nodes.conf"])
            .args(["--cluster-node-timeout", &NODE_TIMEOUT_MS.to_string()])
            // Any replica may take over, however long it was cut off: tests kill at will.
            .args(["--cluster-replica-validity-factor", "0"])
            .arg("--dir")
            .arg(&node.dir)
            .arg("--logfile")
            .arg(node.dir.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(not_found)?;
        *node.child() = Some(child);
        Ok(())
    }

    fn await_answer(&self, index: usize, deadline: Instant) -> io::Result<()> {
        let node = &self.nodes[index];
        loop {
            if let Some(child) = node.child().as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(io::Error::other(format!(
                    "redis-server on port {} exited with {status}: {}",
                    node.port,
                    self.log_tail(index)
                )));
            }
            if answers_ping(node.port) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("redis-server on port {} did not answer PING", node.port),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The directory holding every node's files.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}

/// The port of the master in `view` that serves `slot` and is not marked failed.
fn serving(view: &[NodeView], slot: u16) -> Option<u16> {
    view.iter()
        .find(|n| n.master && !n.failed && n.slots.iter().any(|&(a, b)| a <= slot && slot <= b))
        .map(|n| n.port)
}

/// Parses one line of `CLUSTER NODES` (or `nodes.conf`):
/// `<id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch> <link> <slot> ...`.
fn parse_node_line(line: &str) -> Option<NodeView> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.len() < 8 {
        return None;
    }
    let address = fields[1].split('@').next()?;
    let port = address.rsplit_once(':')?.1.parse().ok()?;
    let flags: Vec<&str> = fields[2].split(',').collect();
    let slots = fields[8..]
        .iter()
        .filter(|s| !s.starts_with('['))
        .filter_map(|s| match s.split_once('-') {
            Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
            None => s.parse().ok().map(|a| (a, a)),
        })
        .collect();
    Some(NodeView {
        id: fields[0].to_owned(),
        port,
        replica_of: (fields[3] != "-").then(|| fields[3].to_owned()),
        master: flags.contains(&"master"),
        failed: flags.contains(&"fail"),
        slots,
    })
}

fn not_found(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::NotFound {
        io::Error::new(io::ErrorKind::NotFound, format!("{INSTALL_HINT} ({e})"))
    } else {
        e
    }
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().rev().take(5).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

/// Whether a server on `port` answers PING.
fn answers_ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut reply = [0u8; 64];
    matches!(stream.read(&mut reply), Ok(n) if n > 0 && reply[..n].starts_with(b"+PONG"))
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        self.kill_all();
    }
}
