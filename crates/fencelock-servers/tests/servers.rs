//! The fault proxy's faults against a real redis-server (Redis's own spawner, a dev-dependency):
//! delay, blackhole, reset, and its count of round trips. A missing `redis-server` fails with a
//! message saying what to install.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use fencelock_redis::servers::RedisServer;
use fencelock_servers::proxy::FaultProxy;

/// Sends PING on a fresh connection to `addr`; `Some(reply)` when one came within `within`.
fn ping(addr: SocketAddr, within: Duration) -> Option<String> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(within)).unwrap();
    stream.write_all(b"PING\r\n").ok()?;
    let mut reply = [0u8; 64];
    match stream.read(&mut reply) {
        Ok(n) if n > 0 => Some(String::from_utf8_lossy(&reply[..n]).into_owned()),
        _ => None,
    }
}

const ANSWER: Duration = Duration::from_secs(5);
/// How long silence must last to count as no answer (a live server answers in microseconds).
const SILENCE: Duration = Duration::from_millis(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_delays_swallows_and_cuts_traffic() {
    let server = RedisServer::spawn();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let via = proxy.addr();
    let ping_via = move |within| tokio::task::spawn_blocking(move || ping(via, within));
    assert_eq!(
        ping_via(ANSWER).await.unwrap().as_deref(),
        Some("+PONG\r\n")
    );

    proxy.set_blackhole(true);
    assert_eq!(ping_via(SILENCE).await.unwrap(), None);
    proxy.heal();
    assert_eq!(
        ping_via(ANSWER).await.unwrap().as_deref(),
        Some("+PONG\r\n")
    );

    proxy.set_reset(true);
    assert_eq!(ping_via(SILENCE).await.unwrap(), None);
    proxy.heal();
    assert_eq!(
        ping_via(ANSWER).await.unwrap().as_deref(),
        Some("+PONG\r\n")
    );

    // A delay longer than the wait: no answer in time, the answer comes later.
    proxy.set_delay(Duration::from_secs(1));
    assert_eq!(ping_via(SILENCE).await.unwrap(), None);
    assert_eq!(
        ping_via(ANSWER).await.unwrap().as_deref(),
        Some("+PONG\r\n")
    );
}

/// Sends `request` on `stream` and reads until `pongs` PONG replies came.
fn pings(stream: &mut TcpStream, request: &[u8], pongs: usize) {
    stream.write_all(request).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    while got.len() < pongs * b"+PONG\r\n".len() {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "the proxy closed the connection");
        got.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_counts_round_trips() {
    let server = RedisServer::spawn();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let via = proxy.addr();
    tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(via).unwrap();
        stream.set_read_timeout(Some(ANSWER)).unwrap();
        pings(&mut stream, b"PING\r\n", 1);
        // Pipelined: one round trip for both.
        pings(&mut stream, b"PING\r\nPING\r\n", 2);
        // One request in two pieces, the second after a pause: one round trip.
        stream.write_all(b"PI").unwrap();
        std::thread::sleep(Duration::from_millis(100));
        pings(&mut stream, b"NG\r\n", 1);
    })
    .await
    .unwrap();
    assert_eq!(proxy.exchanges(), 3);
}
