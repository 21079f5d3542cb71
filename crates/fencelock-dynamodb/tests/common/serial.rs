//! A proxy that lets one HTTP request at a time through to moto.
//!
//! moto's server runs each request on a thread of its own and evaluates a condition and
//! applies the update without a lock around them, so two concurrent conditional writes of one
//! item can both pass their conditions (seen: two holders of one lock, each granted by an
//! `attribute_not_exists(owner)` update). DynamoDB applies each conditional write to an item
//! atomically; this proxy restores that for the tests by passing whole requests one at a
//! time (each client connection keeps its own upstream connection; HTTP/1.1 with
//! `Content-Length` bodies, which the SDK and moto both use).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

/// The proxy: listens on a free port of 127.0.0.1, for as long as the runtime that started
/// it runs.
#[derive(Debug)]
pub(crate) struct SerialProxy {
    pub(crate) port: u16,
}

impl SerialProxy {
    pub(crate) async fn start(target: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let turn = Arc::new(Mutex::new(()));
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let turn = turn.clone();
                tokio::spawn(async move {
                    let _ = serve(client, target, turn).await;
                });
            }
        });
        Ok(SerialProxy { port })
    }
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
