//! `FaultProxy`: a TCP proxy on 127.0.0.1 with faults that can be switched at run time.
//!
//! Put it between a client and any TCP service (Redis, Postgres) and slow, swallow or cut the
//! traffic:
//!
//! ```no_run
//! # async fn demo(target: std::net::SocketAddr) -> std::io::Result<()> {
//! use std::time::Duration;
//! use fencelock_servers::proxy::FaultProxy;
//!
//! let proxy = FaultProxy::start(target).await?;
//! let via = proxy.addr();                            // connect clients here
//! proxy.set_delay(Duration::from_millis(50));         // every chunk, each direction
//! proxy.set_blackhole(true);                          // accept, swallow, forward nothing
//! proxy.set_reset(true);                              // close everything, refuse new
//! proxy.set_lose_answers(true);                       // requests run, answers are lost
//! proxy.heal();                                       // back to a plain proxy
//! let sent = proxy.exchanges();                       // round trips made through it so far
//! # let _ = (via, sent); Ok(()) }
//! ```

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The faults in force.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// Added before forwarding each chunk, in each direction.
    pub delay: Duration,
    /// Accept connections and swallow their traffic; forward nothing.
    pub blackhole: bool,
    /// Close every connection and refuse (accept and close at once) new ones.
    pub reset: bool,
    /// Forward what clients send, but close a connection, both ways, when its server
    /// answers, dropping the answer: a request the server carried out whose answer was lost.
    pub lose_answers: bool,
}

#[derive(Debug)]
struct Shared {
    target: SocketAddr,
    faults: Mutex<Faults>,
    /// Bumped to cut every open connection; dropped (with the proxy) to end every task.
    epoch: watch::Sender<u64>,
    /// Requests that began an exchange: see [`FaultProxy::exchanges`].
    exchanges: AtomicU64,
}

impl Shared {
    fn faults(&self) -> Faults {
        *self.faults.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A fault-injecting TCP proxy; stops and closes every connection when dropped.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `target`.
    pub async fn start(target: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (epoch, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            target,
            faults: Mutex::new(Faults::default()),
            epoch,
            exchanges: AtomicU64::new(0),
        });
        let accept = tokio::spawn(accept_loop(listener, Arc::clone(&shared)));
        Ok(FaultProxy {
            addr,
            shared,
            accept,
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The proxy's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The faults in force.
    pub fn faults(&self) -> Faults {
        self.shared.faults()
    }

    /// Replaces every fault at once.
    pub fn set_faults(&self, faults: Faults) {
        let reset_now = {
            let mut current = self
                .shared
                .faults
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let reset_now = faults.reset && !current.reset;
            *current = faults;
            reset_now
        };
        if reset_now {
            self.shared.epoch.send_modify(|e| *e += 1);
        }
    }

    fn update(&self, change: impl FnOnce(&mut Faults)) {
        let mut faults = self.faults();
        change(&mut faults);
        self.set_faults(faults);
    }

    /// Delays each forwarded chunk by `delay` in each direction; zero removes the delay.
    pub fn set_delay(&self, delay: Duration) {
        self.update(|f| f.delay = delay);
    }

    /// Swallows all traffic (new and open connections stay open, nothing is forwarded).
    pub fn set_blackhole(&self, on: bool) {
        self.update(|f| f.blackhole = on);
    }

    /// Closes every open connection and refuses new ones while on.
    pub fn set_reset(&self, on: bool) {
        self.update(|f| f.reset = on);
    }

    /// Drops every answer of the server and closes its connection, while on: requests still
    /// reach the server and run, their outcome unknown to the client.
    pub fn set_lose_answers(&self, on: bool) {
        self.update(|f| f.lose_answers = on);
    }

    /// The round trips clients made through the proxy so far, over every connection: a
    /// client's data counts once when it is the first on its connection or follows data of
    /// the server's, so a request in several pieces, or several sent together (pipelined),
    /// count once. Compare two readings around one call to count its round trips.
    pub fn exchanges(&self) -> u64 {
        self.shared.exchanges.load(Ordering::SeqCst)
    }

    /// Removes every fault. Connections cut by a reset stay cut.
    pub fn heal(&self) {
        self.set_faults(Faults::default());
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        // Wakes every connection task, which then sees the proxy is gone.
        self.shared.epoch.send_modify(|e| *e += 1);
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            // Out of descriptors or similar: back off instead of spinning.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        if shared.faults().reset {
            drop(client);
            continue;
        }
        tokio::spawn(serve(client, Arc::clone(&shared)));
    }
}

async fn serve(client: TcpStream, shared: Arc<Shared>) {
    let mut cut = shared.epoch.subscribe();
    cut.mark_unchanged();
    let _ = client.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    if shared.faults().blackhole {
        // Swallow until the blackhole lifts or the connection is cut, then connect late.
        let swallowed = swallow_until_healed(client_read, &shared, &mut cut).await;
        let Some(client_read) = swallowed else {
            return;
        };
        return forward(client_read, client_write, &shared, cut).await;
    }
    forward(client_read, client_write, &shared, cut).await
}

/// Reads and drops data while the blackhole is on. `None` when the connection ended.
async fn swallow_until_healed(
    mut read: OwnedReadHalf,
    shared: &Shared,
    cut: &mut watch::Receiver<u64>,
) -> Option<OwnedReadHalf> {
    let mut buf = vec![0u8; 16 * 1024];
    while shared.faults().blackhole {
        tokio::select! {
            n = read.read(&mut buf) => match n {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            },
            _ = cut.changed() => return None,
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
    Some(read)
}

async fn forward(
    client_read: OwnedReadHalf,
    client_write: OwnedWriteHalf,
    shared: &Arc<Shared>,
    mut cut: watch::Receiver<u64>,
) {
    let Ok(server) = TcpStream::connect(shared.target).await else {
        return;
    };
    let _ = server.set_nodelay(true);
    let (server_read, server_write) = server.into_split();
    // Whether the server spoke last: the client's next data begins an exchange.
    let answered = Arc::new(AtomicBool::new(true));
    let up = pump(
        client_read,
        server_write,
        Arc::clone(shared),
        false,
        Arc::clone(&answered),
    );
    let down = pump(
        server_read,
        client_write,
        Arc::clone(shared),
        true,
        answered,
    );
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = cut.changed() => {}
    }
    // Dropping both halves of both sockets closes the connection in both directions.
}

/// Copies `from` to `to` under the faults in force; `answers` is the server-to-client way, and
/// `answered` says whether the server spoke last (see [`FaultProxy::exchanges`]).
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    shared: Arc<Shared>,
    answers: bool,
    answered: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let faults = shared.faults();
        if faults.blackhole {
            continue;
        }
        if answers && faults.lose_answers {
            // Returning ends `forward`, which closes both sockets.
            return;
        }
        if !faults.delay.is_zero() {
            tokio::time::sleep(faults.delay).await;
        }
        if answers {
            // Before the client can read it, so its next request sees the flag.
            answered.store(true, Ordering::SeqCst);
        } else if answered.swap(false, Ordering::SeqCst) {
            shared.exchanges.fetch_add(1, Ordering::SeqCst);
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
