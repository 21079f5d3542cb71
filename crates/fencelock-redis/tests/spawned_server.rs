//! `servers::RedisServer` against a real redis-server: spawned, killed, paused and restarted on
//! its data, and its options' passwords kept out of `Debug`. A missing `redis-server` fails
//! with a message saying what to install.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use fencelock_redis::servers::{RedisServer, RedisServerOptions};

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

#[test]
fn a_server_is_killed_paused_and_restarted() {
    let server = RedisServer::spawn_with(RedisServerOptions::persistent());
    assert_eq!(ping(server.addr(), ANSWER).as_deref(), Some("+PONG\r\n"));
    server.pause().unwrap();
    assert_eq!(ping(server.addr(), SILENCE), None);
    server.resume().unwrap();
    assert_eq!(ping(server.addr(), ANSWER).as_deref(), Some("+PONG\r\n"));
    server.kill();
    assert!(!server.is_running());
    assert_eq!(ping(server.addr(), SILENCE), None);
    server.try_restart().unwrap();
    assert!(server.is_running());
    assert_eq!(ping(server.addr(), ANSWER).as_deref(), Some("+PONG\r\n"));
}

#[test]
fn passwords_stay_out_of_debug_output() {
    let options = RedisServerOptions {
        password: Some("pw-secret-1".into()),
        acl_user: Some(("app".into(), "pw-secret-2".into())),
        ..RedisServerOptions::default()
    };
    let shown = format!("{options:?}");
    assert!(!shown.contains("pw-secret"), "{shown}");
    assert!(shown.contains("app"), "{shown}");
}
