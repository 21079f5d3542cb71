//! Real ZooKeeper servers for tests and fault runs (feature `servers`): one standalone
//! server, or an ensemble of several, on free ports of 127.0.0.1, in a temporary directory,
//! killed and removed on drop.
//!
//! The servers are the jars of the Debian package `zookeeper` (installed by
//! `scripts/test-deps`), run with `java` (`QuorumPeerMain`): no service, no shared server.
//! They run with a 100 ms tick, so elections after a kill take well under a second, and allow
//! session timeouts from 200 ms to 60 s (a lock backend's longest ttl is its session timeout).
//! Data lives in `/dev/shm` when it exists, so the fsync of every write costs little. They
//! run with `jute.maxbuffer` at 4 MiB, as fencelock's storage needs for 1 MiB values.
//!
//! With [`ZooKeeper::tls`] a standalone server also serves a TLS client port
//! (`secureClientPort`, through the Netty connection factory, which the TLS port needs) with
//! a PEM certificate and key; the plain port stays for the readiness probe.
//!
//! The process handling (kill with SIGKILL, restart on the same ports and data, pause with
//! SIGSTOP, resume) is `fencelock-servers`' [`Members`]; this module is the ZooKeeper part
//! ([`ZooKeeper`]: the configuration files, the command line and the `srvr` probe) and what
//! only a ZooKeeper group answers ([`ZkMembers`]).
//!
//! ```no_run
//! # fn demo() -> std::io::Result<()> {
//! use fencelock_zookeeper::servers::{ZkMembers, ZkServer, ZooKeeper};
//! let ensemble = ZkServer::start(ZooKeeper::plain(), 3)?;
//! let url = ensemble.url();  // zookeeper://127.0.0.1:<p1>,127.0.0.1:<p2>,127.0.0.1:<p3>
//! ensemble.kill(2);          // a minority is gone: the ensemble still answers
//! ensemble.try_restart(2)?;  // same ports and data: the member catches up
//! ensemble.pause(0)?;        // SIGSTOP: connections stay open, nothing is answered
//! ensemble.resume(0)?;
//! # let _ = url; Ok(()) }
//! ```

use std::io;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fencelock_servers::members::{Member, Members, Service, ask};

/// The variable that names the ZooKeeper class path (default: the Debian package's
/// `/usr/share/java/zookeeper.jar`, whose manifest lists the jars it needs).
pub const ZOOKEEPER_CLASSPATH_VAR: &str = "FENCELOCK_ZOOKEEPER_CLASSPATH";

/// The variable that names the `java` binary (default: `java` on `PATH`).
pub const JAVA_BIN_VAR: &str = "FENCELOCK_JAVA";

const DEFAULT_CLASSPATH: &str = "/usr/share/java/zookeeper.jar";
/// Netty's codec jar: the TLS port's handler needs it, and the Debian jar's manifest leaves it
/// out (it comes with libnetty-java, which zookeeper depends on).
const NETTY_CODEC: &str = "/usr/share/java/netty-codec.jar";

fn classpath() -> String {
    std::env::var(ZOOKEEPER_CLASSPATH_VAR).unwrap_or_else(|_| DEFAULT_CLASSPATH.to_owned())
}

fn java_bin() -> String {
    std::env::var(JAVA_BIN_VAR).unwrap_or_else(|_| "java".to_owned())
}

/// ZooKeeper processes owned by their creator: one standalone server, or an ensemble.
/// Dropping it kills every member and removes their directory.
pub type ZkServer = Members<ZooKeeper>;

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

/// ZooKeeper as a [`Service`]. A member's ports are its client port, then its TLS port when
/// it serves TLS, then (in an ensemble) its quorum and election ports.
#[derive(Debug, Clone, Default)]
pub struct ZooKeeper {
    tls: Option<ZkTlsFiles>,
}

impl ZooKeeper {
    /// Plain servers.
    pub fn plain() -> Self {
        ZooKeeper { tls: None }
    }

    /// Servers that also serve TLS with `files`; clients need not show a certificate
    /// (`ssl.clientAuth=none`).
    pub fn tls(files: ZkTlsFiles) -> Self {
        ZooKeeper { tls: Some(files) }
    }

    fn secure_port(&self, member: &Member) -> Option<u16> {
        self.tls.as_ref().map(|_| member.ports[1])
    }

    /// The class path, with Netty's codec for a TLS port when the default one is used.
    fn classpath(&self) -> String {
        let base = classpath();
        if self.tls.is_some() && std::env::var_os(ZOOKEEPER_CLASSPATH_VAR).is_none() {
            format!("{base}:{NETTY_CODEC}")
        } else {
            base
        }
    }
}

impl Service for ZooKeeper {
    fn name(&self) -> &'static str {
        "ZooKeeper"
    }

    fn install_hint(&self) -> &'static str {
        "install ZooKeeper: run scripts/test-deps (Debian package zookeeper, which needs a \
         Java runtime), or set FENCELOCK_ZOOKEEPER_CLASSPATH and FENCELOCK_JAVA"
    }

    fn ports(&self, count: usize) -> usize {
        1 + usize::from(self.tls.is_some()) + if count > 1 { 2 } else { 0 }
    }

    fn start_timeout(&self) -> Duration {
        Duration::from_secs(60)
    }

    fn check_installed(&self) -> io::Result<()> {
        let jar = classpath();
        if self.tls.is_some()
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
                format!("{} ({jar} does not exist)", self.install_hint()),
            ));
        }
        Ok(())
    }

    fn prepare(&self, members: &[Member]) -> io::Result<()> {
        let quorum: Vec<String> = if members.len() > 1 {
            members
                .iter()
                .map(|m| {
                    let n = m.ports.len();
                    format!(
                        "server.{}=127.0.0.1:{}:{}",
                        m.index + 1,
                        m.ports[n - 2],
                        m.ports[n - 1]
                    )
                })
                .collect()
        } else {
            Vec::new()
        };
        for member in members {
            std::fs::write(member.dir.join("myid"), format!("{}\n", member.index + 1))?;
            let mut secure = String::new();
            if let (Some(files), Some(port)) = (&self.tls, self.secure_port(member)) {
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
                member.client_port(),
                secure,
                quorum.join("\n")
            );
            std::fs::write(member.dir.join("zoo.cfg"), config)?;
        }
        Ok(())
    }

    fn command(&self, members: &[Member], index: usize) -> Command {
        let mut command = Command::new(java_bin());
        command
            // A small heap and the quick JIT tier: a test server starts in about a second.
            .args(["-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .arg("-Dzookeeper.jmx.log4j.disable=true")
            // Room for a 1 MiB value and the multi around it (fencelock's storage needs it).
            .arg("-Djute.maxbuffer=4194304")
            .arg("-cp")
            .arg(self.classpath())
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(members[index].dir.join("zoo.cfg"));
        command
    }

    /// It answers `srvr` with a mode (it serves requests), and its TLS port, if any, accepts.
    fn serving(&self, member: &Member) -> bool {
        let secure_up = self
            .secure_port(member)
            .is_none_or(|port| TcpStream::connect(("127.0.0.1", port)).is_ok());
        mode(member.client_port()).is_some() && secure_up
    }

    /// The leader (the standalone server of a one-member ensemble).
    fn leader(&self, members: &[Member]) -> Option<usize> {
        members.iter().position(|m| {
            matches!(
                mode(m.client_port()).as_deref(),
                Some("leader" | "standalone")
            )
        })
    }
}

/// What only a group of ZooKeeper servers answers: its URLs and each member's mode.
pub trait ZkMembers {
    /// `zookeeper://127.0.0.1:<port>,...`: every member, in order.
    fn url(&self) -> String;

    /// `127.0.0.1:<port>,...`: every member, as ZooKeeper's own clients write it.
    fn connect_string(&self) -> String;

    /// `zookeeper://localhost:<secure port>,...?tls=true&tls_ca=<ca>`: every member's TLS
    /// port, by the name the test certificates are made out to; `None` without TLS.
    fn tls_url(&self, ca: &Path) -> Option<String>;

    /// Member `index`'s TLS client port, when it serves one.
    fn secure_port(&self, index: usize) -> Option<u16>;

    /// Member `index`'s mode as `srvr` reports it (`standalone`, `leader`, `follower`);
    /// `None` when it does not answer or does not serve requests (no quorum).
    fn mode(&self, index: usize) -> Option<String>;
}

impl ZkMembers for Members<ZooKeeper> {
    fn url(&self) -> String {
        format!("zookeeper://{}", self.hosts())
    }

    fn connect_string(&self) -> String {
        self.hosts()
    }

    fn tls_url(&self, ca: &Path) -> Option<String> {
        let hosts: Option<Vec<String>> = self
            .members()
            .iter()
            .map(|m| {
                self.service()
                    .secure_port(m)
                    .map(|p| format!("localhost:{p}"))
            })
            .collect();
        let ca = ca.to_string_lossy().replace('%', "%25").replace('&', "%26");
        Some(format!(
            "zookeeper://{}?tls=true&tls_ca={ca}",
            hosts?.join(",")
        ))
    }

    fn secure_port(&self, index: usize) -> Option<u16> {
        self.service().secure_port(&self.members()[index])
    }

    fn mode(&self, index: usize) -> Option<String> {
        mode(self.client_port(index))
    }
}

/// The mode `srvr` reports on `port`; `None` when the member does not answer or does not
/// serve requests.
fn mode(port: u16) -> Option<String> {
    let reply = ask(port, "srvr")?;
    let line = reply.lines().find(|l| l.starts_with("Mode: "))?;
    Some(line.trim_start_matches("Mode: ").trim().to_owned())
}
