//! [`RedisServer`]: a real `redis-server` process on a free port of 127.0.0.1, killed on drop.
//!
//! The chaos run starts its lock and storage nodes with it, and kills and restarts them
//! (through its [`Process`] impl); tests use the same servers, with shorthands that panic
//! saying what to install ([`spawn`](RedisServer::spawn), [`restart`](RedisServer::restart),
//! [`stop`](RedisServer::stop), [`cont`](RedisServer::cont)).

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use fencelock_servers::port::free_port;
use fencelock_servers::set::Process;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const INSTALL_HINT: &str = "install redis-server (apt-get install redis-server) or put it on PATH";
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// How to start a server. `Debug` shows the passwords as `***`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RedisServerOptions {
    /// AOF with `appendfsync always` (counters survive a restart), instead of no persistence.
    pub persistence: bool,
    /// `requirepass` for the default user.
    pub password: Option<String>,
    /// An extra ACL user `(name, password)` with every permission; [`RedisServer::url`] then
    /// logs in as this user.
    pub acl_user: Option<(String, String)>,
}

impl fmt::Debug for RedisServerOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServerOptions")
            .field("persistence", &self.persistence)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field(
                "acl_user",
                &self.acl_user.as_ref().map(|(user, _)| (user, "***")),
            )
            .finish()
    }
}

impl RedisServerOptions {
    /// AOF persistence with `appendfsync always`.
    pub fn persistent() -> Self {
        RedisServerOptions {
            persistence: true,
            ..Self::default()
        }
    }
}

/// A `redis-server` process owned by its creator. Dropping it kills the process and removes its
/// directory.
///
/// ```no_run
/// # fn demo() -> std::io::Result<()> {
/// use fencelock_redis::servers::{RedisServer, RedisServerOptions};
/// let server = RedisServer::try_spawn_with(RedisServerOptions::persistent())?;
/// let url = server.url();  // redis://127.0.0.1:<port>
/// server.kill();           // SIGKILL: the server is gone
/// server.try_restart()?;   // same port and directory, so AOF persistence is observable
/// # let _ = url; Ok(()) }
/// ```
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    options: RedisServerOptions,
    dir: tempfile::TempDir,
    child: Mutex<Option<Child>>,
}

impl RedisServer {
    /// Starts a server without persistence or password.
    ///
    /// # Panics
    /// If `redis-server` is missing or does not start, with a message saying what to install.
    pub fn spawn() -> Self {
        Self::spawn_with(RedisServerOptions::default())
    }

    /// Starts a server with `options`.
    ///
    /// # Panics
    /// If `redis-server` is missing or does not start, with a message saying what to install.
    pub fn spawn_with(options: RedisServerOptions) -> Self {
        match Self::try_spawn_with(options) {
            Ok(server) => server,
            Err(e) => panic!("cannot start redis-server: {e}"),
        }
    }

    /// [`spawn`](Self::spawn), reporting failures.
    pub fn try_spawn() -> io::Result<Self> {
        Self::try_spawn_with(RedisServerOptions::default())
    }

    /// Starts a server with `options`. A missing `redis-server` is an
    /// [`io::ErrorKind::NotFound`] error that says what to install.
    pub fn try_spawn_with(options: RedisServerOptions) -> io::Result<Self> {
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
    pub fn options(&self) -> &RedisServerOptions {
        &self.options
    }

    /// Whether the process is running (a paused one counts as running).
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
    /// runs), and waits until it answers; an error when it does not come back.
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

    /// [`try_restart`](Self::try_restart), for tests.
    ///
    /// # Panics
    /// If the server does not come back.
    pub fn restart(&self) {
        if let Err(e) = self.try_restart() {
            panic!("{e}");
        }
    }

    /// Freezes the server with SIGSTOP: connections stay open, nothing is answered.
    pub fn pause(&self) -> io::Result<()> {
        self.signal(Signal::SIGSTOP)
    }

    /// Resumes a server frozen with [`pause`](Self::pause).
    pub fn resume(&self) -> io::Result<()> {
        self.signal(Signal::SIGCONT)
    }

    /// [`pause`](Self::pause), for tests.
    ///
    /// # Panics
    /// If the signal cannot be sent.
    pub fn stop(&self) {
        if let Err(e) = self.pause() {
            panic!("{e}");
        }
    }

    /// [`resume`](Self::resume), for tests: continues a server frozen with
    /// [`stop`](Self::stop).
    ///
    /// # Panics
    /// If the signal cannot be sent.
    pub fn cont(&self) {
        if let Err(e) = self.resume() {
            panic!("{e}");
        }
    }

    /// Sends `signal`; `Ok` when there is no process to signal.
    fn signal(&self, signal: Signal) -> io::Result<()> {
        let Some(pid) = self.child().as_ref().map(Child::id) else {
            return Ok(());
        };
        let pid = i32::try_from(pid).map_err(io::Error::other)?;
        kill(Pid::from_raw(pid), signal).map_err(|e| {
            io::Error::other(format!(
                "cannot send {signal} to redis-server on port {}: {e}",
                self.port
            ))
        })
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
            // The answer must come from this child: a server of another process on the same
            // port answers too, while this child fails to bind and exits.
            if serving_pid(self.port, &self.options) == Some(child.id()) {
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

/// The process id of the `redis-server` answering on `port` (`INFO server`), logging in
/// with `options`' credentials first; `None` while nothing answers, the server is still
/// loading its data (its `PING` is not `+PONG`), or the reply is not that.
fn serving_pid(port: u16, options: &RedisServerOptions) -> Option<u32> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    let mut request = Vec::new();
    match (&options.acl_user, &options.password) {
        (Some((user, pass)), _) => resp_command(&mut request, &["AUTH", user, pass]),
        (None, Some(pass)) => resp_command(&mut request, &["AUTH", pass]),
        (None, None) => {}
    }
    resp_command(&mut request, &["PING"]);
    resp_command(&mut request, &["INFO", "server"]);
    stream.write_all(&request).ok()?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    // The INFO reply is a few KiB; read until its `process_id` line is whole.
    while reply.len() < 64 * 1024 {
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        reply.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&reply);
        let after_auth = text.strip_prefix("+OK\r\n").unwrap_or(&text);
        if after_auth.len() >= 5 && !after_auth.starts_with("+PONG") {
            return None;
        }
        if let Some(rest) = text.split("process_id:").nth(1)
            && let Some((pid, _)) = rest.split_once("\r\n")
        {
            return pid.trim().parse().ok();
        }
    }
    None
}

/// Appends `args` as one RESP command.
fn resp_command(out: &mut Vec<u8>, args: &[&str]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
    }
}

impl Process for RedisServer {
    fn is_running(&self) -> bool {
        RedisServer::is_running(self)
    }

    fn kill(&self) {
        RedisServer::kill(self);
    }

    fn try_restart(&self) -> io::Result<()> {
        RedisServer::try_restart(self)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // A stopped process still dies of SIGKILL; no SIGCONT needed.
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A second server started on a port another server already answers on must fail to
    /// start, not take the first server's answer for its own.
    #[test]
    fn another_server_on_the_port_is_not_taken_for_this_one() {
        for options in [
            RedisServerOptions::default(),
            RedisServerOptions {
                password: Some("p4ss".into()),
                ..RedisServerOptions::default()
            },
        ] {
            let first = RedisServer::try_spawn_with(options.clone())
                .expect("start redis-server (apt-get install redis-server)");
            let second = RedisServer {
                port: first.port(),
                options,
                dir: tempfile::tempdir().expect("a temporary directory"),
                child: Mutex::new(None),
            };
            let error = second
                .start()
                .expect_err("the port is the first server's, so the second cannot start");
            assert!(
                error.to_string().contains("exited"),
                "the second server's own exit is reported: {error}"
            );
            assert!(first.is_running());
        }
    }
}
