//! `EtcdServer`: real `etcd` processes (one member, or a cluster of several) on free ports of
//! 127.0.0.1, in a temporary directory, killed and removed on drop.
//!
//! The chaos run starts its etcd members with it and kills and restarts them (the member comes
//! back on its ports and data directory and catches up); `fencelock-testkit` re-exports it for
//! tests (with panicking shorthands).
//!
//! Members can be killed (SIGKILL), restarted on the same ports and data, paused (SIGSTOP)
//! and resumed. They run with a 50 ms heartbeat and a 500 ms election timeout, so leader
//! elections after a kill take well under a second and the cluster's shortest lease is one
//! second (etcd's minimum is 1.5 election timeouts, rounded up to whole seconds). Data lives
//! in `/dev/shm` when it exists, so the fsync of every write costs little.
//!
//! ```no_run
//! # fn demo() -> std::io::Result<()> {
//! use fencelock_servers::etcd::EtcdServer;
//! let cluster = EtcdServer::try_spawn_cluster(3)?;
//! let url = cluster.url();   // etcd://127.0.0.1:<p1>,127.0.0.1:<p2>,127.0.0.1:<p3>
//! cluster.kill(2);           // a minority is gone: the cluster still answers
//! cluster.try_restart(2)?;   // same ports and data: the member catches up
//! cluster.pause(0)?;         // SIGSTOP: connections stay open, nothing is answered
//! cluster.resume(0)?;
//! # let _ = url; Ok(()) }
//! ```

use std::fmt;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

pub use crate::port::free_port;

/// The variable that names the `etcd` binary (default: `etcd` on `PATH`).
pub const ETCD_BIN_VAR: &str = "FENCELOCK_ETCD";

const INSTALL_HINT: &str = "install etcd: run scripts/test-deps (Debian package etcd-server), put \
                            `etcd` on PATH, or set FENCELOCK_ETCD";
const START_TIMEOUT: Duration = Duration::from_secs(30);

fn etcd_bin() -> String {
    std::env::var(ETCD_BIN_VAR).unwrap_or_else(|_| "etcd".to_owned())
}

/// One member: its ports, its data directory and its process.
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    dir: PathBuf,
    child: Mutex<Option<Child>>,
}

impl fmt::Debug for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Member")
            .field("name", &self.name)
            .field("client_port", &self.client_port)
            .finish_non_exhaustive()
    }
}

impl Member {
    fn child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `etcd` processes owned by their creator: one member, or a cluster. Dropping it kills every
/// member and removes their directory.
#[derive(Debug)]
pub struct EtcdServer {
    members: Vec<Member>,
    initial_cluster: String,
    token: String,
    dir: tempfile::TempDir,
}

impl EtcdServer {
    /// A cluster of `members` members, started together and waited for until each reports
    /// itself healthy (a leader is elected). A missing `etcd` is an [`io::ErrorKind::NotFound`]
    /// error that says what to install.
    pub fn try_spawn_cluster(members: usize) -> io::Result<Self> {
        if members == 0 {
            return Err(io::Error::other(
                "an etcd cluster needs at least one member",
            ));
        }
        let mut last_error = None;
        // A free port can be taken between probing and binding; try a few times.
        for _ in 0..5 {
            let server = Self::prepare(members)?;
            match server.start_all() {
                Ok(()) => return Ok(server),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(e),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("etcd did not start")))
    }

    fn prepare(count: usize) -> io::Result<Self> {
        let shm = Path::new("/dev/shm");
        let mut builder = tempfile::Builder::new();
        builder.prefix("fencelock-etcd-");
        let dir = if shm.is_dir() {
            builder.tempdir_in(shm).or_else(|_| builder.tempdir())?
        } else {
            builder.tempdir()?
        };
        let mut members = Vec::with_capacity(count);
        for index in 0..count {
            let name = format!("m{index}");
            members.push(Member {
                dir: dir.path().join(&name),
                name,
                client_port: free_port()?,
                peer_port: free_port()?,
                child: Mutex::new(None),
            });
        }
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let token = dir
            .path()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "fencelock".to_owned());
        Ok(EtcdServer {
            members,
            initial_cluster,
            token,
            dir,
        })
    }

    fn start_all(&self) -> io::Result<()> {
        for index in 0..self.members.len() {
            self.launch(index)?;
        }
        let deadline = Instant::now() + START_TIMEOUT;
        for index in 0..self.members.len() {
            self.await_healthy(index, deadline)?;
        }
        Ok(())
    }

    /// `etcd://127.0.0.1:<port>,...`: every member, in order.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect();
        format!("etcd://{}", hosts.join(","))
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the cluster has no member (never: a cluster has at least one).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Member `index`'s client port on 127.0.0.1.
    pub fn client_port(&self, index: usize) -> u16 {
        self.members[index].client_port
    }

    /// The directory holding every member's data and log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Whether member `index` runs (a paused one counts as running).
    pub fn is_running(&self, index: usize) -> bool {
        self.members[index]
            .child()
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Kills member `index` with SIGKILL and waits for it to exit. Its data stays for a
    /// restart.
    pub fn kill(&self, index: usize) {
        if let Some(mut child) = self.members[index].child().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `index` again on the same ports and data (killing it first if it still
    /// runs), and waits until it reports itself healthy; that needs a quorum of members up. An
    /// error when it does not come back.
    pub fn try_restart(&self, index: usize) -> io::Result<()> {
        self.kill(index);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            // The ports can linger briefly after a kill.
            let launched = self
                .launch(index)
                .and_then(|()| self.await_healthy(index, deadline));
            match launched {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() >= deadline || e.kind() == io::ErrorKind::NotFound => {
                    return Err(e);
                }
                Err(_) => {
                    self.kill(index);
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
    }

    /// Restarts member `index` without waiting for it to be healthy (when no quorum is up,
    /// it cannot be).
    pub fn relaunch(&self, index: usize) -> io::Result<()> {
        self.kill(index);
        self.launch(index)
    }

    /// Freezes member `index` with SIGSTOP: its connections stay open, nothing is answered,
    /// and the others elect a leader without it.
    pub fn pause(&self, index: usize) -> io::Result<()> {
        self.signal(index, Signal::SIGSTOP)
    }

    /// Resumes member `index` after [`pause`](Self::pause).
    pub fn resume(&self, index: usize) -> io::Result<()> {
        self.signal(index, Signal::SIGCONT)
    }

    /// Whether member `index` answers its health check (`/health`: it sees a leader).
    pub fn is_healthy(&self, index: usize) -> bool {
        healthy(self.members[index].client_port)
    }

    /// The member that leads the cluster now: the one whose status (`/v3/maintenance/status`)
    /// names itself as the leader. `None` when no member answers so (an election is under way,
    /// or no quorum is up).
    pub fn leader(&self) -> Option<usize> {
        self.members
            .iter()
            .position(|m| status(m.client_port).is_some_and(|(member, leader)| member == leader))
    }

    /// The last lines of member `index`'s log, for failure messages.
    pub fn log_tail(&self, index: usize) -> String {
        let log = std::fs::read_to_string(self.log_path(index)).unwrap_or_default();
        let lines: Vec<&str> = log.lines().rev().take(5).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
    }

    fn log_path(&self, index: usize) -> PathBuf {
        self.dir
            .path()
            .join(format!("{}.log", self.members[index].name))
    }

    fn signal(&self, index: usize, signal: Signal) -> io::Result<()> {
        let member = &self.members[index];
        let Some(pid) = member.child().as_ref().map(Child::id) else {
            return Ok(());
        };
        let pid = i32::try_from(pid).map_err(io::Error::other)?;
        kill(Pid::from_raw(pid), signal).map_err(|e| {
            io::Error::other(format!(
                "cannot send {signal} to etcd member {} (port {}): {e}",
                member.name, member.client_port
            ))
        })
    }

    /// Starts member `index`'s process (without waiting for it).
    fn launch(&self, index: usize) -> io::Result<()> {
        let member = &self.members[index];
        let client = format!("http://127.0.0.1:{}", member.client_port);
        let peer = format!("http://127.0.0.1:{}", member.peer_port);
        let log = self.log_path(index);
        let child = Command::new(etcd_bin())
            .arg("--name")
            .arg(&member.name)
            .arg("--data-dir")
            .arg(&member.dir)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", &self.token])
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .args(["--logger", "zap", "--log-level", "warn"])
            .arg("--log-outputs")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                if e.kind() == io::ErrorKind::NotFound {
                    io::Error::new(io::ErrorKind::NotFound, format!("{INSTALL_HINT} ({e})"))
                } else {
                    e
                }
            })?;
        *member.child() = Some(child);
        Ok(())
    }

    fn await_healthy(&self, index: usize, deadline: Instant) -> io::Result<()> {
        let member = &self.members[index];
        loop {
            if let Some(child) = member.child().as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(io::Error::other(format!(
                    "etcd member {} (port {}) exited with {status}: {}",
                    member.name,
                    member.client_port,
                    self.log_tail(index)
                )));
            }
            if healthy(member.client_port) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "etcd member {} (port {}) not healthy within {START_TIMEOUT:?}: {}",
                        member.name,
                        member.client_port,
                        self.log_tail(index)
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Whether the member on `port` answers `GET /health` with `"health":"true"`.
fn healthy(port: u16) -> bool {
    let request =
        format!("GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    http(port, &request).is_some_and(|reply| reply.contains("\"health\":\"true\""))
}

/// The member id and the leader's id the member on `port` reports in its status, as the
/// decimal strings of etcd's JSON gateway.
fn status(port: u16) -> Option<(String, String)> {
    let reply = http(
        port,
        &format!(
            "POST /v3/maintenance/status HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
             Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
        ),
    )?;
    let field = |name: &str| {
        let start = reply.find(&format!("\"{name}\":\""))? + name.len() + 4;
        let len = reply[start..].find('"')?;
        Some(reply[start..start + len].to_owned())
    };
    Some((field("member_id")?, field("leader")?))
}

/// Sends `request` to the member on `port` and reads the whole reply; `None` when it does not
/// answer.
fn http(port: u16, request: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(request.as_bytes()).ok()?;
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    Some(reply)
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        // A stopped process still dies of SIGKILL; no SIGCONT needed.
        for index in 0..self.members.len() {
            self.kill(index);
        }
    }
}
