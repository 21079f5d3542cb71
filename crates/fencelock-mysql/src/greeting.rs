//! What a server that is not MySQL says when it is given a MySQL URL: a MySQL or MariaDB
//! server speaks first (its handshake), while Redis and PostgreSQL wait for the client, so
//! a plain connect would only time out and say "no answer".

use std::time::Duration;

use fencelock_core::{Error, HostPort};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long the probe waits for the handshake before it speaks itself. A MySQL server that
/// greets later is still recognised: its handshake comes before any answer to the probe.
pub(crate) const GREETING_WAIT: Duration = Duration::from_millis(500);

/// What the probe found at the server's address.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Peer {
    /// It sent a MySQL handshake, or the probe could not tell (no answer at all, refused).
    MySqlOrUnknown,
    /// It waited for the client and then answered something that is not MySQL, or hung up.
    NotMySql(&'static str),
}

/// Connects to `host` on a connection of its own and classifies what answers there.
/// Never returns before the server has had [`GREETING_WAIT`] to greet.
pub(crate) async fn probe(host: &HostPort) -> Peer {
    let Ok(mut stream) = TcpStream::connect((host.host.as_str(), host.port)).await else {
        return Peer::MySqlOrUnknown;
    };
    let mut buf = [0u8; 64];
    if let Ok(read) = tokio::time::timeout(GREETING_WAIT, stream.read(&mut buf)).await {
        return classify(read.ok(), &buf, false);
    }
    // Silent: a MySQL server would have greeted. Redis answers an inline PING; PostgreSQL
    // reads it as a startup packet of absurd length and hangs up.
    if stream.write_all(b"PING\r\n").await.is_err() {
        return Peer::NotMySql("it closed the connection without a MySQL handshake");
    }
    let read = stream.read(&mut buf).await.ok();
    classify(read, &buf, true)
}

fn classify(read: Option<usize>, buf: &[u8], spoke_first: bool) -> Peer {
    match read {
        // A handshake packet: 3-byte length, sequence 0, protocol version 10.
        Some(n) if n >= 5 && buf[3] == 0 && buf[4] == 10 => Peer::MySqlOrUnknown,
        // An error packet (0xff) sent at once: a MySQL server refusing this host.
        Some(n) if n >= 5 && buf[3] == 0 && buf[4] == 0xff && !spoke_first => Peer::MySqlOrUnknown,
        Some(n) if n >= 5 && buf.starts_with(b"+PONG") => {
            Peer::NotMySql("it answered the Redis protocol")
        }
        Some(0) | None if spoke_first => Peer::NotMySql(
            "it waited for the client to speak first and then hung up (PostgreSQL does)",
        ),
        Some(0) | None => Peer::NotMySql("it closed the connection without a MySQL handshake"),
        Some(_) => Peer::NotMySql("it answered something other than the MySQL protocol"),
    }
}

/// The error for a server `server` that is not MySQL.
pub(crate) fn not_mysql(server: &str, why: &str) -> Error {
    Error::config(format!(
        "{server}: not a MySQL or MariaDB server ({why}); check the URL's host and port"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handshake_is_mysql_and_anything_else_is_not() {
        let handshake = [0x4a, 0, 0, 0, 10, b'8'];
        assert_eq!(classify(Some(6), &handshake, false), Peer::MySqlOrUnknown);
        assert_eq!(classify(Some(6), &handshake, true), Peer::MySqlOrUnknown);
        assert!(matches!(
            classify(Some(7), b"+PONG\r\n", true),
            Peer::NotMySql(why) if why.contains("Redis")
        ));
        assert!(matches!(
            classify(Some(0), &[], true),
            Peer::NotMySql(why) if why.contains("PostgreSQL")
        ));
        assert!(matches!(
            classify(Some(8), b"HTTP/1.1", false),
            Peer::NotMySql(_)
        ));
    }
}
