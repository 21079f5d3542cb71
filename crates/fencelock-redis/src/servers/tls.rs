//! [`TlsRedis`]: a `redis-server` that speaks TLS only, on a free port of 127.0.0.1, with the
//! PEM files a [`RedisTlsFiles`] names, killed and its directory removed on drop.

use std::fmt;
use std::io::{self, Read};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use fencelock_servers::port::free_port;

const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The PEM files of a server speaking TLS: its certificate and private key, and the CA
/// certificates (`--tls-ca-cert-file`, which redis-server requires even when it asks clients
/// for no certificate).
#[derive(Debug, Clone)]
pub struct RedisTlsFiles {
    /// The server certificate (PEM), made out to the name clients connect to (`localhost`).
    pub cert: PathBuf,
    /// Its private key (PEM, unencrypted).
    pub key: PathBuf,
    /// The CA certificates (PEM).
    pub ca: PathBuf,
}

/// A `redis-server` that speaks TLS only (`--port 0 --tls-port <port>`); clients need not
/// present a certificate. Killed on drop.
///
/// ```no_run
/// # fn demo(cert: std::path::PathBuf, key: std::path::PathBuf, ca: std::path::PathBuf) {
/// use fencelock_redis::servers::{RedisTlsFiles, TlsRedis};
/// let server = TlsRedis::spawn(&RedisTlsFiles { cert, key, ca });
/// let url = server.url(); // rediss://localhost:<port>
/// # let _ = url; }
/// ```
pub struct TlsRedis {
    port: u16,
    dir: tempfile::TempDir,
    child: Mutex<Option<Child>>,
}

impl fmt::Debug for TlsRedis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsRedis")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl TlsRedis {
    /// Starts the server with `files`.
    ///
    /// # Panics
    /// If `redis-server` is missing, built without TLS, or does not start, saying which.
    pub fn spawn(files: &RedisTlsFiles) -> Self {
        match Self::try_spawn(files) {
            Ok(server) => server,
            Err(e) => panic!("cannot start redis-server with TLS: {e}"),
        }
    }

    /// [`spawn`](Self::spawn), reporting failures. A missing `redis-server`, or one without
    /// TLS support, is an [`io::ErrorKind::NotFound`] error that says what to install.
    pub fn try_spawn(files: &RedisTlsFiles) -> io::Result<Self> {
        let mut last = None;
        // A free port can be taken between probing and binding; try a few times.
        for _ in 0..5 {
            match Self::start(files) {
                Ok(server) => return Ok(server),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("redis-server did not start")))
    }

    fn start(files: &RedisTlsFiles) -> io::Result<Self> {
        let dir = tempfile::Builder::new().prefix("fl-redis-tls-").tempdir()?;
        let port = free_port()?;
        let child = Command::new("redis-server")
            .args(["--port", "0", "--tls-port", &port.to_string()])
            .arg("--tls-cert-file")
            .arg(&files.cert)
            .arg("--tls-key-file")
            .arg(&files.key)
            .arg("--tls-ca-cert-file")
            .arg(&files.ca)
            .args(["--tls-auth-clients", "no", "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--protected-mode", "no", "--loglevel", "warning"])
            .arg("--dir")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                if e.kind() == io::ErrorKind::NotFound {
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        "redis-server is not installed (Debian: apt-get install redis-server, \
                         which is built with TLS)",
                    )
                } else {
                    io::Error::new(e.kind(), format!("cannot run redis-server: {e}"))
                }
            })?;
        let server = TlsRedis {
            port,
            dir,
            child: Mutex::new(Some(child)),
        };
        if let Err(e) = server.await_listening() {
            let text = e.to_string();
            if text.contains("not built with TLS") || text.contains("tls-port") {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "this redis-server has no TLS support ({text}); install one built with \
                         BUILD_TLS=yes (Debian's redis-server 6 and later are)"
                    ),
                ));
            }
            return Err(e);
        }
        Ok(server)
    }

    /// Waits until the port accepts connections, or the process exits (its stderr then says
    /// why).
    fn await_listening(&self) -> io::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(said) = self.exited() {
                return Err(io::Error::other(format!(
                    "redis-server exited at start: {said}"
                )));
            }
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(io::Error::other(format!(
                    "redis-server did not listen on 127.0.0.1:{} within {START_TIMEOUT:?}",
                    self.port
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The exit status and stderr of a process that has exited.
    fn exited(&self) -> Option<String> {
        let mut guard = self.child();
        let child = guard.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => {
                let mut said = String::new();
                if let Some(mut err) = child.stderr.take() {
                    let _ = err.read_to_string(&mut said);
                }
                Some(format!("{status}: {}", said.trim()))
            }
            _ => None,
        }
    }

    fn child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `rediss://localhost:<port>` (the name the test certificates are made out to).
    pub fn url(&self) -> String {
        format!("rediss://localhost:{}", self.port)
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's directory.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        if let Some(mut child) = self.child().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
