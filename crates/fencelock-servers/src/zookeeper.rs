//! `ZkServer`: real ZooKeeper servers (one standalone server, or an ensemble of several) on
//! free ports of 127.0.0.1, in a temporary directory, killed and removed on drop.
//!
//! The servers are the jars of the Debian package `zookeeper` (installed by
//! `scripts/test-deps`), run with `java` (`QuorumPeerMain`): no service, no shared server.
//! They run with a 100 ms tick, so elections after a kill take well under a second, and allow
//! session timeouts from 200 ms to 60 s (a lock backend's longest ttl is its session timeout).
//! Data lives in `/dev/shm` when it exists, so the fsync of every write costs little. They
//! run with `jute.maxbuffer` at 4 MiB, as fencelock's storage needs for 1 MiB values.
//!
//! With [`ZkServer::try_spawn_tls`] a standalone server also serves a TLS client port
//! (`secureClientPort`, through the Netty connection factory, which the TLS port needs) with
//! a PEM certificate and key; the plain port stays for the readiness probe.
//!
//! Members can be killed (SIGKILL), restarted on the same ports and data, paused (SIGSTOP)
//! and resumed.
//!
//! ```no_run
//! # fn demo() -> std::io::Result<()> {
//! use fencelock_servers::zookeeper::ZkServer;
//! let ensemble = ZkServer::try_spawn_ensemble(3)?;
//! let url = ensemble.url();  // zookeeper://127.0.0.1:<p1>,127.0.0.1:<p2>,127.0.0.1:<p3>
//! ensemble.kill(2);          // a minority is gone: the ensemble still answers
//! ensemble.try_restart(2)?;  // same ports and data: the member catches up
//! ensemble.pause(0)?;        // SIGSTOP: connections stay open, nothing is answered
//! ensemble.resume(0)?;
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

/// The variable that names the ZooKeeper class path (default: the Debian package's
/// `/usr/share/java/zookeeper.jar`, whose manifest lists the jars it needs).
pub const ZOOKEEPER_CLASSPATH_VAR: &str = "FENCELOCK_ZOOKEEPER_CLASSPATH";

/// The variable that names the `java` binary (default: `java` on `PATH`).
pub const JAVA_BIN_VAR: &str = "FENCELOCK_JAVA";

const DEFAULT_CLASSPATH: &str = "/usr/share/java/zookeeper.jar";
/// Netty's codec jar: the TLS port's handler needs it, and the Debian jar's manifest leaves it
/// out (it comes with libnetty-java, which zookeeper depends on).
const NETTY_CODEC: &str = "/usr/share/java/netty-codec.jar";
const INSTALL_HINT: &str = "install ZooKeeper: run scripts/test-deps (Debian package zookeeper, \
                            which needs a Java runtime), or set FENCELOCK_ZOOKEEPER_CLASSPATH \
                            and FENCELOCK_JAVA";
const START_TIMEOUT: Duration = Duration::from_secs(60);

fn classpath() -> String {
    std::env::var(ZOOKEEPER_CLASSPATH_VAR).unwrap_or_else(|_| DEFAULT_CLASSPATH.to_owned())
}

fn java_bin() -> String {
    std::env::var(JAVA_BIN_VAR).unwrap_or_else(|_| "java".to_owned())
}

/// One member: its ports, its data directory and its process.
struct Member {
    id: usize,
    client_port: u16,
    secure_port: Option<u16>,
    dir: PathBuf,
    child: Mutex<Option<Child>>,
}

impl fmt::Debug for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Member")
            .field("id", &self.id)
            .field("client_port", &self.client_port)
            .finish_non_exhaustive()
    }
}

impl Member {
    fn child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// ZooKeeper processes owned by their creator: one standalone server, or an ensemble.
/// Dropping it kills every member and removes their directory.
#[derive(Debug)]
pub struct ZkServer {
    members: Vec<Member>,
    dir: tempfile::TempDir,
    tls: bool,
}

/// The PEM files of a TLS port: the server's certificate and private key (unencrypted
/// PKCS#8), and the CA certificates its trust store holds (for client certificates).
#[derive(Debug, Clone)]
pub struct ZkTlsFiles {
    /// The server certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM, `-----BEGIN PRIVATE KEY-----`).
    pub key: PathBuf,
    /// The CA certificates (PEM).
    pub ca: PathBuf,
}

impl ZkServer {
    /// One standalone server.
    pub fn try_spawn() -> io::Result<Self> {
        Self::try_spawn_ensemble(1)
    }

    /// An ensemble of `members` members (one is a standalone server), started together and
    /// waited for until each serves requests (a leader is elected). A missing ZooKeeper or
    /// Java is an [`io::ErrorKind::NotFound`] error that says what to install.
    pub fn try_spawn_ensemble(members: usize) -> io::Result<Self> {
        Self::try_spawn_with(members, None)
    }

    /// One standalone server that also serves TLS on [`secure_port`](Self::secure_port),
    /// with `files`; clients need not show a certificate (`ssl.clientAuth=none`).
    pub fn try_spawn_tls(files: &ZkTlsFiles) -> io::Result<Self> {
        Self::try_spawn_with(1, Some(files))
    }

    fn try_spawn_with(members: usize, tls: Option<&ZkTlsFiles>) -> io::Result<Self> {
        if members == 0 {
            return Err(io::Error::other(
                "a ZooKeeper ensemble needs at least one member",
            ));
        }
        let jar = classpath();
        if tls.is_some()
            && std::env::var_os(ZOOKEEPER_CLASSPATH_VAR).is_none()
            && !Path::new(NETTY_CODEC).exists()
        {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{NETTY_CODEC} does not exist: ZooKeeper's TLS port needs it (Debian \
                     package libnetty-java; run scripts/test-deps)"
                ),
            ));
        }
        if !jar.split(':').all(|part| Path::new(part).exists()) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{INSTALL_HINT} ({jar} does not exist)"),
            ));
        }
        let mut last_error = None;
        // A free port can be taken between probing and binding; try a few times.
        for _ in 0..3 {
            let server = Self::prepare(members, tls)?;
            match server.start_all() {
                Ok(()) => return Ok(server),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(e),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("ZooKeeper did not start")))
    }

    fn prepare(count: usize, tls: Option<&ZkTlsFiles>) -> io::Result<Self> {
        let shm = Path::new("/dev/shm");
        let mut builder = tempfile::Builder::new();
        builder.prefix("fencelock-zk-");
        let dir = if shm.is_dir() {
            builder.tempdir_in(shm).or_else(|_| builder.tempdir())?
        } else {
            builder.tempdir()?
        };
        let mut members = Vec::with_capacity(count);
        let mut quorum = Vec::new();
        for index in 0..count {
            let id = index + 1;
            let client_port = free_port()?;
            let secure_port = tls.map(|_| free_port()).transpose()?;
            if count > 1 {
                quorum.push(format!(
                    "server.{id}=127.0.0.1:{}:{}",
                    free_port()?,
                    free_port()?
                ));
            }
            members.push(Member {
                id,
                client_port,
                secure_port,
                dir: dir.path().join(format!("m{id}")),
                child: Mutex::new(None),
            });
        }
        for member in &members {
            std::fs::create_dir_all(&member.dir)?;
            std::fs::write(member.dir.join("myid"), format!("{}\n", member.id))?;
            let mut secure = String::new();
            if let (Some(files), Some(port)) = (tls, member.secure_port) {
                // The PEM key store is one file: the key, then the certificate.
                let mut keystore = std::fs::read(&files.key)?;
                keystore.push(b'\n');
                keystore.extend(std::fs::read(&files.cert)?);
                let keystore_path = member.dir.join("keystore.pem");
                std::fs::write(&keystore_path, keystore)?;
                secure = format!(
                    "secureClientPort={port}\nsecureClientPortAddress=127.0.0.1\n\
                     serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
                     ssl.keyStore.location={}\nssl.keyStore.type=PEM\n\
                     ssl.trustStore.location={}\nssl.trustStore.type=PEM\n\
                     ssl.clientAuth=none\n",
                    keystore_path.display(),
                    files.ca.display()
                );
            }
            let config = format!(
                "tickTime=100\ninitLimit=50\nsyncLimit=20\ndataDir={}\nclientPort={}\n\
                 clientPortAddress=127.0.0.1\nminSessionTimeout=200\nmaxSessionTimeout=60000\n\
                 admin.enableServer=false\n4lw.commands.whitelist=srvr,ruok\n\
                 forceSync=no\n{}{}\n",
                member.dir.display(),
                member.client_port,
                secure,
                quorum.join("\n")
            );
            std::fs::write(member.dir.join("zoo.cfg"), config)?;
        }
        Ok(ZkServer {
            members,
            dir,
            tls: tls.is_some(),
        })
    }

    fn start_all(&self) -> io::Result<()> {
        for index in 0..self.members.len() {
            self.launch(index)?;
        }
        let deadline = Instant::now() + START_TIMEOUT;
        for index in 0..self.members.len() {
            self.await_serving(index, deadline)?;
        }
        Ok(())
    }

    /// `zookeeper://127.0.0.1:<port>,...`: every member, in order.
    pub fn url(&self) -> String {
        format!("zookeeper://{}", self.connect_string())
    }

    /// `127.0.0.1:<port>,...`: every member, as ZooKeeper's own clients write it.
    pub fn connect_string(&self) -> String {
        let hosts: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect();
        hosts.join(",")
    }

    /// `zookeeper://localhost:<secure port>,...?tls=true&tls_ca=<ca>`: every member's TLS
    /// port, by the name the test certificates are made out to; `None` without TLS.
    pub fn tls_url(&self, ca: &Path) -> Option<String> {
        let hosts: Option<Vec<String>> = self
            .members
            .iter()
            .map(|m| m.secure_port.map(|p| format!("localhost:{p}")))
            .collect();
        let ca = ca.to_string_lossy().replace('%', "%25").replace('&', "%26");
        Some(format!(
            "zookeeper://{}?tls=true&tls_ca={ca}",
            hosts?.join(",")
        ))
    }

    /// Member `index`'s TLS client port, when it serves one.
    pub fn secure_port(&self, index: usize) -> Option<u16> {
        self.members[index].secure_port
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the ensemble has no member (never: it has at least one).
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
    /// runs), and waits until it serves requests; that needs a quorum of members up.
    pub fn try_restart(&self, index: usize) -> io::Result<()> {
        self.kill(index);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            // The ports can linger briefly after a kill.
            let launched = self
                .launch(index)
                .and_then(|()| self.await_serving(index, deadline));
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

    /// Freezes member `index` with SIGSTOP: its connections stay open, nothing is answered,
    /// and the others elect a leader without it.
    pub fn pause(&self, index: usize) -> io::Result<()> {
        self.signal(index, Signal::SIGSTOP)
    }

    /// Resumes member `index` after [`pause`](Self::pause).
    pub fn resume(&self, index: usize) -> io::Result<()> {
        self.signal(index, Signal::SIGCONT)
    }

    /// Member `index`'s mode as `srvr` reports it (`standalone`, `leader`, `follower`);
    /// `None` when it does not answer or does not serve requests (no quorum).
    pub fn mode(&self, index: usize) -> Option<String> {
        let reply = four_letter(self.members[index].client_port, "srvr")?;
        let line = reply.lines().find(|l| l.starts_with("Mode: "))?;
        Some(line.trim_start_matches("Mode: ").trim().to_owned())
    }

    /// The member that leads the ensemble now (the standalone server of a one-member one).
    pub fn leader(&self) -> Option<usize> {
        (0..self.members.len())
            .find(|&i| matches!(self.mode(i).as_deref(), Some("leader" | "standalone")))
    }

    /// The last lines of member `index`'s log, for failure messages.
    pub fn log_tail(&self, index: usize) -> String {
        let log = std::fs::read_to_string(self.log_path(index)).unwrap_or_default();
        let lines: Vec<&str> = log.lines().rev().take(5).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
    }

    fn log_path(&self, index: usize) -> PathBuf {
        self.members[index].dir.join("server.log")
    }

    fn signal(&self, index: usize, signal: Signal) -> io::Result<()> {
        let member = &self.members[index];
        let Some(pid) = member.child().as_ref().map(Child::id) else {
            return Ok(());
        };
        let pid = i32::try_from(pid).map_err(io::Error::other)?;
        kill(Pid::from_raw(pid), signal).map_err(|e| {
            io::Error::other(format!(
                "cannot send {signal} to ZooKeeper member {} (port {}): {e}",
                member.id, member.client_port
            ))
        })
    }

    /// Starts member `index`'s process (without waiting for it).
    fn launch(&self, index: usize) -> io::Result<()> {
        let member = &self.members[index];
        let log = std::fs::File::create(self.log_path(index))?;
        let child = Command::new(java_bin())
            // A small heap and the quick JIT tier: a test server starts in about a second.
            .args(["-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .arg("-Dzookeeper.jmx.log4j.disable=true")
            // Room for a 1 MiB value and the multi around it (fencelock's storage needs it).
            .arg("-Djute.maxbuffer=4194304")
            .arg("-cp")
            .arg(self.classpath())
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(member.dir.join("zoo.cfg"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
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

    /// The class path, with Netty's codec for a TLS port when the default one is used.
    fn classpath(&self) -> String {
        let base = classpath();
        if self.tls && std::env::var_os(ZOOKEEPER_CLASSPATH_VAR).is_none() {
            format!("{base}:{NETTY_CODEC}")
        } else {
            base
        }
    }

    fn await_serving(&self, index: usize, deadline: Instant) -> io::Result<()> {
        let member = &self.members[index];
        loop {
            if let Some(child) = member.child().as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(io::Error::other(format!(
                    "ZooKeeper member {} (port {}) exited with {status}: {}",
                    member.id,
                    member.client_port,
                    self.log_tail(index)
                )));
            }
            let secure_up = member
                .secure_port
                .is_none_or(|port| TcpStream::connect(("127.0.0.1", port)).is_ok());
            if self.mode(index).is_some() && secure_up {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "ZooKeeper member {} (port {}) not serving within {START_TIMEOUT:?}: {}",
                        member.id,
                        member.client_port,
                        self.log_tail(index)
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Sends a four-letter command to the member on `port` and reads the whole reply; `None`
/// when it does not answer.
fn four_letter(port: u16, command: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(command.as_bytes()).ok()?;
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    Some(reply)
}

impl Drop for ZkServer {
    fn drop(&mut self) {
        // A stopped process still dies of SIGKILL; no SIGCONT needed.
        for index in 0..self.members.len() {
            self.kill(index);
        }
    }
}
