//! A DynamoDB API to test against (feature `servers`): moto's server
//! ([`fencelock_servers::moto`], which serves DynamoDB on its S3 endpoint) behind a proxy
//! that lets one HTTP request at a time through ([`SerialProxy`]).
//!
//! **Why the proxy.** moto's server runs each request on a thread of its own and evaluates a
//! condition and applies the update without a lock around them, so two concurrent conditional
//! writes of one item can both pass their conditions (seen: two holders of one lock, each
//! granted by an `attribute_not_exists(owner)` update). DynamoDB applies each conditional
//! write to an item atomically, and fencelock's lock and fences rest on that; the proxy
//! restores it by passing whole requests one at a time (each client connection keeps its own
//! upstream connection; HTTP/1.1 with `Content-Length` bodies, which the SDK and moto both
//! use). The crate's tests and the spawner of `fencelock chaos --spawn dynamodb` both reach
//! moto through it, so neither can meet a double grant that DynamoDB would never make.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use fencelock_dynamodb::servers::MotoDynamo;
//! let moto = MotoDynamo::start().await?; // moto_server, and the proxy in this runtime
//! let url = moto.url("locks", "&create=true");
//! // dynamodb://fencelock:fencelock@locks?region=us-east-1&endpoint=http://127.0.0.1:<proxy>&create=true
//! # let _ = url; Ok(()) }
//! ```

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;
use tokio::task::{AbortHandle, JoinSet};

use fencelock_servers::moto::Moto;

/// The proxy: listens on a free port of 127.0.0.1 and passes one request at a time to its
/// target, for as long as the value lives (dropping it closes the listener and every
/// connection) and the runtime that started it runs.
#[derive(Debug)]
pub struct SerialProxy {
    port: u16,
    task: AbortHandle,
}

impl SerialProxy {
    /// Starts a proxy to `target` in the current tokio runtime.
    pub async fn start(target: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let turn = Arc::new(Mutex::new(()));
        let task = tokio::spawn(async move {
            // Owned by the accept loop: aborting it aborts every connection.
            let mut connections = JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let turn = turn.clone();
                connections.spawn(async move {
                    let _ = serve(client, target, turn).await;
                });
                while connections.try_join_next().is_some() {}
            }
        });
        Ok(SerialProxy {
            port,
            task: task.abort_handle(),
        })
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Keeps the proxy running for as long as its runtime runs (a test's), without a value to
    /// hold; returns its port.
    pub fn detach(self) -> u16 {
        let port = self.port;
        std::mem::forget(self);
        port
    }
}

impl Drop for SerialProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The access key id and secret key moto is given (it accepts any).
pub const MOTO_CREDENTIALS: (&str, &str) = ("fencelock", "fencelock");

/// The region the URLs of [`MotoDynamo`] name.
pub const MOTO_REGION: &str = "us-east-1";

/// A moto server with a [`SerialProxy`] in front of it: a DynamoDB API whose conditional
/// writes are atomic per item. moto keeps its tables in memory and stops when the process
/// that started it ends (not when this value is dropped; the proxy stops then).
#[derive(Debug)]
pub struct MotoDynamo {
    moto: Moto,
    proxy: SerialProxy,
}

impl MotoDynamo {
    /// Starts `moto_server` on a free port (off the async threads: it waits for the server)
    /// and the proxy in the current runtime. A missing `moto_server` is an
    /// [`io::ErrorKind::NotFound`] error saying what to install.
    pub async fn start() -> io::Result<Self> {
        let moto = tokio::task::spawn_blocking(Moto::try_start)
            .await
            .map_err(io::Error::other)??;
        MotoDynamo::in_front_of(moto).await
    }

    /// A proxy in front of `moto`, a server already running.
    pub async fn in_front_of(moto: Moto) -> io::Result<Self> {
        let proxy = SerialProxy::start(([127, 0, 0, 1], moto.port).into()).await?;
        Ok(MotoDynamo { moto, proxy })
    }

    /// The port of the proxy: where clients go.
    pub fn port(&self) -> u16 {
        self.proxy.port
    }

    /// The port of moto itself, behind the proxy.
    pub fn moto_port(&self) -> u16 {
        self.moto.port
    }

    /// The `dynamodb://` URL of `table` through the proxy, with [`MOTO_CREDENTIALS`] and
    /// [`MOTO_REGION`], followed by `options` (`&create=true`).
    pub fn url(&self, table: &str, options: &str) -> String {
        url_at(self.port(), table, options)
    }
}

/// The `dynamodb://` URL of `table` on a moto server (or a proxy) at `port` of 127.0.0.1,
/// with [`MOTO_CREDENTIALS`] and [`MOTO_REGION`], followed by `options`.
pub fn url_at(port: u16, table: &str, options: &str) -> String {
    let (key, secret) = MOTO_CREDENTIALS;
    format!(
        "dynamodb://{key}:{secret}@{table}?region={MOTO_REGION}&endpoint=http://127.0.0.1:{port}{options}"
    )
}

/// One message: its head (through the blank line) and body, and whether the peer closes the
/// connection after it.
struct Message {
    bytes: Vec<u8>,
    close: bool,
}

async fn serve(client: TcpStream, target: SocketAddr, turn: Arc<Mutex<()>>) -> io::Result<()> {
    let (client_read, mut client_write) = client.into_split();
    let mut client_read = BufReader::new(client_read);
    let mut upstream: Option<(
        BufReader<tokio::net::tcp::OwnedReadHalf>,
        tokio::net::tcp::OwnedWriteHalf,
    )> = None;
    loop {
        let Some(request) = read_message(&mut client_read, false).await? else {
            return Ok(());
        };
        let response = {
            let _turn = turn.lock().await;
            let (up_read, up_write) = match &mut upstream {
                Some(connection) => connection,
                None => {
                    let (read, write) = TcpStream::connect(target).await?.into_split();
                    upstream.insert((BufReader::new(read), write))
                }
            };
            up_write.write_all(&request.bytes).await?;
            read_message(up_read, true).await?
        };
        let Some(response) = response else {
            return Ok(());
        };
        client_write.write_all(&response.bytes).await?;
        if response.close {
            upstream = None;
        }
        if request.close || response.close {
            return Ok(());
        }
    }
}

/// Reads one HTTP/1.1 message; `None` at a clean end of the stream. A response without a
/// `Content-Length` is read to the end of the stream.
async fn read_message<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    response: bool,
) -> io::Result<Option<Message>> {
    let mut head = Vec::new();
    loop {
        let mut byte = [0u8; 1];
        if reader.read(&mut byte).await? == 0 {
            return if head.is_empty() {
                Ok(None)
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
        head.push(byte[0]);
        if head.ends_with(b"\r\n\r\n") {
            break;
        }
    }
    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let header = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name).map(|v| v.trim().to_owned()))
    };
    let close = header("connection:").is_some_and(|v| v == "close");
    let mut bytes = head;
    match header("content-length:").and_then(|v| v.parse::<usize>().ok()) {
        Some(length) => {
            let start = bytes.len();
            bytes.resize(start + length, 0);
            reader.read_exact(&mut bytes[start..]).await?;
            Ok(Some(Message { bytes, close }))
        }
        None if response
            && !text.starts_with("http/1.1 204")
            && !text.starts_with("http/1.1 304") =>
        {
            reader.read_to_end(&mut bytes).await?;
            Ok(Some(Message { bytes, close: true }))
        }
        None => Ok(Some(Message { bytes, close })),
    }
}
