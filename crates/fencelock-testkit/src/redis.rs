//! `RedisServer`: a real `redis-server` process on a free port, killed on drop.
//!
//! The server itself lives in `fencelock-servers` (the chaos kill fault restarts the same servers);
//! this wrapper gives tests shorthands that panic with a message saying what to install
//! instead of returning an error, and passes everything else on.
//!
//! ```no_run
//! use fencelock_testkit::redis::RedisServer;
//! let server = RedisServer::spawn();
//! let url = server.url(); // redis://127.0.0.1:<port>
//! server.kill();          // SIGKILL: the server is gone
//! server.restart();       // same port and directory, so AOF persistence is observable
//! ```

use std::io;
use std::net::SocketAddr;

pub use fencelock_servers::redis::{RedisOptions, free_port};

/// A `redis-server` process owned by the test; see [`fencelock_servers::redis::RedisServer`].
#[derive(Debug)]
pub struct RedisServer(fencelock_servers::redis::RedisServer);

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
        match fencelock_servers::redis::RedisServer::try_spawn_with(options) {
            Ok(server) => RedisServer(server),
            Err(e) => panic!("cannot start redis-server: {e}"),
        }
    }

    /// `redis://[user:password@]127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        self.0.url()
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.0.port()
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.0.addr()
    }

    /// The options it was started with.
    pub fn options(&self) -> &RedisOptions {
        self.0.options()
    }

    /// Whether the process is running (a stopped one counts as running).
    pub fn is_running(&self) -> bool {
        self.0.is_running()
    }

    /// Kills the server with SIGKILL and waits for it to exit.
    pub fn kill(&self) {
        self.0.kill();
    }

    /// [`restart`](Self::restart), reporting a server that does not come back.
    pub fn try_restart(&self) -> io::Result<()> {
        self.0.try_restart()
    }

    /// Starts the server again on the same port and directory and waits until it answers.
    ///
    /// # Panics
    /// If it does not come back.
    pub fn restart(&self) {
        if let Err(e) = self.try_restart() {
            panic!("{e}");
        }
    }

    /// Freezes the server with SIGSTOP: connections stay open, nothing is answered.
    ///
    /// # Panics
    /// If the signal cannot be sent.
    pub fn stop(&self) {
        if let Err(e) = self.0.pause() {
            panic!("{e}");
        }
    }

    /// Resumes a server frozen with [`stop`](Self::stop).
    ///
    /// # Panics
    /// If the signal cannot be sent.
    pub fn cont(&self) {
        if let Err(e) = self.0.resume() {
            panic!("{e}");
        }
    }
}
