//! What speaks at a server's address when a connect went wrong in a way the driver cannot
//! explain: a plain Redis at a `rediss://` URL (it waits for a newline that a TLS handshake
//! never sends, so the connect only times out) and a TLS-only port at a `redis://` URL (it
//! resets the connection). Each probe uses a connection of its own.

use std::time::Duration;

use fencelock_core::HostPort;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a connect may go unanswered before the plain-Redis probe runs: long enough that
/// a server that answers connects never sees a probe.
pub(crate) const PROBE_AFTER: Duration = Duration::from_millis(500);

/// A TLS 1.2 ClientHello offering two ECDHE suites and nothing else: any TLS server answers
/// it with a TLS record (a ServerHello, or an alert when it wants more), which is all the
/// probe needs to see.
#[rustfmt::skip]
const CLIENT_HELLO: [u8; 52] = [
    0x16, 0x03, 0x01, 0x00, 0x2f, // record: handshake, TLS 1.0 framing, 47 bytes
    0x01, 0x00, 0x00, 0x2b, // ClientHello, 43 bytes
    0x03, 0x03, // TLS 1.2
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // random (zeros will do)
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0x00, // no session id
    0x00, 0x04, 0xc0, 0x2b, 0xc0, 0x2f, // two ECDHE-AES128-GCM suites
    0x01, 0x00, // null compression only
];

/// Sends `request` on a fresh connection to `host` and gives the first bytes of the answer
/// (empty when the server hung up), within `limit`.
async fn first_bytes(host: &HostPort, request: &[u8], limit: Duration) -> Option<Vec<u8>> {
    let ask = async {
        let mut stream = TcpStream::connect((host.host.as_str(), host.port))
            .await
            .ok()?;
        stream.write_all(request).await.ok()?;
        let mut buf = [0u8; 16];
        let n = stream.read(&mut buf).await.ok()?;
        Some(buf[..n].to_vec())
    };
    tokio::time::timeout(limit, ask).await.ok().flatten()
}

/// Whether a TLS server answers at `host`: a TLS record (handshake or alert, version 3.x).
pub(crate) async fn speaks_tls(host: &HostPort, limit: Duration) -> bool {
    first_bytes(host, &CLIENT_HELLO, limit)
        .await
        .is_some_and(|b| is_tls_record(&b))
}

/// Whether plain Redis answers at `host`: `PING` gets a RESP simple string or error
/// (`+PONG`, `-NOAUTH ...`).
pub(crate) async fn speaks_plain_redis(host: &HostPort, limit: Duration) -> bool {
    first_bytes(host, b"PING\r\n", limit)
        .await
        .is_some_and(|b| is_resp_reply(&b))
}

fn is_tls_record(bytes: &[u8]) -> bool {
    matches!(bytes, [0x15 | 0x16, 0x03, ..])
}

fn is_resp_reply(bytes: &[u8]) -> bool {
    bytes.starts_with(b"+PONG") || bytes.starts_with(b"-NOAUTH") || bytes.starts_with(b"-ERR")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_hello_is_one_well_formed_record() {
        assert_eq!(CLIENT_HELLO[0], 0x16);
        assert_eq!(usize::from(CLIENT_HELLO[4]), CLIENT_HELLO.len() - 5);
        assert_eq!(usize::from(CLIENT_HELLO[8]), CLIENT_HELLO.len() - 9);
        assert_eq!(CLIENT_HELLO[43..], [0, 0, 4, 0xc0, 0x2b, 0xc0, 0x2f, 1, 0]);
    }

    #[test]
    fn records_and_replies_are_told_apart() {
        assert!(is_tls_record(b"\x15\x03\x03\x00\x02\x02\x28"));
        assert!(is_tls_record(b"\x16\x03\x03\x00\x7a"));
        assert!(!is_tls_record(b"+PONG\r\n"));
        assert!(is_resp_reply(b"+PONG\r\n"));
        assert!(is_resp_reply(b"-NOAUTH Authentication required.\r\n"));
        assert!(!is_resp_reply(b"\x15\x03\x03"));
        assert!(!is_resp_reply(b""));
    }
}
