//! `RedisServer`: a real `redis-server` process on a free port, killed on drop.
//!
//! ```no_run
//! use fencelock_testkit::redis::RedisServer;
//! let server = RedisServer::spawn();
//! let url = server.url(); // redis://127.0.0.1:<port>
//! server.kill();          // SIGKILL: the server is gone
//! server.restart();       // same port and directory, so AOF persistence is observable
//! ```

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

const INSTALL_HINT: &str = "install redis-server (apt-get install redis-server) or put it on PATH";
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// How to start a server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RedisOptions {
    /// AOF with `appendfsync always` (counters survive a restart), instead of no persistence.
    pub persistence: bool,
    /// `requirepass` for the default user.
    pub password: Option<String>,
    /// An extra ACL user `(name, password)` with every permission; [`RedisServer::url`] then
    /// logs in as this user.
    pub acl_user: Option<(String, String)>,
}

impl RedisOptions {
    /// AOF persistence with `appendfsync always`.
    pub fn persistent() -> Self {
        RedisOptions {
            persistence: true,
            ..Self::default()
        }
    }
}

/// A `redis-server` process owned by the test. Dropping it kills the process and removes its
/// directory.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    options: RedisOptions,
    dir: tempfile::TempDir,
    child: Mutex<Option<Child>>,
}

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl RedisServer {
    /// Starts a server without persistence or password.
    ///
    /// # Panics
    /// If `redis-server` is missing or does not start, with a message saying what to install.
    pub fn spawn() -> Self {
        Self::spawn_with(RedisOptions::default())
    }

    /// Starts a server with `options`.
    ///
    /// # Panics
    /// If `redis-server` is missing or does not start, with a message saying what to install.
    pub fn spawn_with(options: RedisOptions) -> Self {
        match Self::try_spawn_with(options) {
            Ok(server) => server,
            Err(e) => panic!("cannot start redis-server: {e}"),
        }
    }

    /// Starts a server with `options`, reporting failures instead of panicking.
    pub fn try_spawn_with(options: RedisOptions) -> io::Result<Self> {
        let mut last_error = None;
        // A free port can be taken between probing and binding; try a few.
        for _ in 0..5 {
            let server = RedisServer {
                port: free_port()?,
                options: options.clone(),
                dir: tempfile::Builder::new()
                    .prefix("fencelock-redis-")
                    .tempdir()?,
                child: Mutex::new(None),
            };
            match server.start() {
                Ok(()) => return Ok(server),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(e),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("redis-server did not start")))
    }

    /// `redis://[user:password@]127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        match (&self.options.acl_user, &self.options.password) {
            (Some((user, pass)), _) => format!("redis://{user}:{pass}@127.0.0.1:{}", self.port),
            (None, Some(pass)) => format!("redis://:{pass}@127.0.0.1:{}", self.port),
            (None, None) => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The options it was started with.
    pub fn options(&self) -> &RedisOptions {
        &self.options
    }

    /// Whether the process is running (it may be stopped with [`stop`](Self::stop)).
    pub fn is_running(&self) -> bool {
        self.child()
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Kills the server with SIGKILL and waits for it to exit. Nothing is flushed: only what
    /// `appendfsync always` already wrote survives.
    pub fn kill(&self) {
        if let Some(mut child) = self.child().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and directory (killing it first if it still
    /// runs), and waits until it answers.
    ///
    /// # Panics
    /// If it does not come back.
    pub fn restart(&self) {
        if let Err(e) = self.try_restart() {
            panic!("{e}");
        }
    }

    /// [`restart`](Self::restart), reporting a server that does not come back instead of
    /// panicking.
    pub fn try_restart(&self) -> io::Result<()> {
        self.kill();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            // The port can linger briefly after a kill.
            match self.start() {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() >= deadline => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("redis-server on port {} did not restart: {e}", self.port),
                    ));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Freezes the server with SIGSTOP: connections stay open, nothing is answered.
    pub fn stop(&self) {
        if !self.signal("STOP") {
            panic!(
                "could not send SIGSTOP to redis-server on port {}",
                self.port
            );
        }
    }

    /// Resumes a server frozen with [`stop`](Self::stop).
    pub fn cont(&self) {
        if !self.signal("CONT") {
            panic!(
                "could not send SIGCONT to redis-server on port {}",
                self.port
            );
        }
    }

    /// Sends SIG`name`; `true` when there was no process to signal or it was delivered.
    fn signal(&self, name: &str) -> bool {
        let Some(pid) = self.child().as_ref().map(Child::id) else {
            return true;
        };
        Command::new("kill")
            .arg(format!("-{name}"))
            .arg(pid.to_string())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    fn child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn start(&self) -> io::Result<()> {
        let mut command = Command::new("redis-server");
        command
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--daemonize", "no"])
            .args(["--protected-mode", "no", "--loglevel", "warning"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.dir.path().join("redis.log"));
        if self.options.persistence {
            command.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            command.args(["--appendonly", "no"]);
        }
        if let Some(pass) = &self.options.password {
            command.arg("--requirepass").arg(pass);
        }
        if let Some((user, pass)) = &self.options.acl_user {
            command.arg("--user").args([
                user.as_str(),
                "on",
                &format!(">{pass}"),
                "~*",
                "&*",
                "+@all",
            ]);
        }
        let mut child = command
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
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                let log =
                    std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default();
                return Err(io::Error::other(format!(
                    "redis-server on port {} exited with {status}: {}",
                    self.port,
                    log.lines().rev().take(5).collect::<Vec<_>>().join(" | ")
                )));
            }
            if answers_ping(self.port) {
                *self.child() = Some(child);
                return Ok(());
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("redis-server on port {} did not answer PING", self.port),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Whether a server on `port` answers PING (an authentication demand counts: it is up;
/// `-LOADING` does not).
fn answers_ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut reply = [0u8; 64];
    match stream.read(&mut reply) {
        Ok(n) if n > 0 => {
            let reply = &reply[..n];
            reply.starts_with(b"+PONG") || reply.starts_with(b"-NOAUTH")
        }
        _ => false,
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // A stopped process still dies of SIGKILL; no SIGCONT needed.
        self.kill();
    }
}
