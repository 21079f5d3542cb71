//! Connect errors, classified: TLS set-up, an untrusted certificate, not PostgreSQL.

use std::time::Duration;

use fencelock_core::{Error, HostPort};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// [`connect_failure`], and for an error it leaves unexplained, asks the server whether it
/// speaks PostgreSQL at all: the client may have read another server's greeting as a
/// PostgreSQL message (without TLS no `SSLRequest` is sent, so that greeting reaches the
/// message reader, which may wait for a length it will never get) and failed only with an
/// end of file or a time-out. One probe, on that failure only, within `within`.
pub(crate) async fn explain_connect_failure(
    servers: &[HostPort],
    error: Error,
    within: Duration,
) -> Error {
    let error = connect_failure(servers, error);
    if matches!(error, Error::InvalidConfig { .. }) {
        return error;
    }
    let Some(server) = servers.first() else {
        return error;
    };
    if speaks_postgres(server, within.min(Duration::from_secs(2))).await != Some(false) {
        return error;
    }
    let source = match error {
        Error::Unavailable { source, .. } | Error::Backend { source, .. } => source,
        _ => None,
    };
    Error::InvalidConfig {
        message: format!(
            "Postgres server {server}: not a PostgreSQL server (it answered something other \
             than the PostgreSQL protocol)"
        ),
        source,
    }
}

/// Whether the server at `server` answers an `SSLRequest` as PostgreSQL (and PgBouncer) do,
/// with one byte `S`, `N` or `E`: `Some(false)` when it answered something else, `None` when
/// it could not be asked (unreachable, a Unix socket, silent until `within`, closed).
async fn speaks_postgres(server: &HostPort, within: Duration) -> Option<bool> {
    if server.host.is_empty() || server.host.starts_with('/') {
        return None;
    }
    // Length 8, then the SSLRequest code 80877103.
    const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
    let probe = async {
        let mut stream = TcpStream::connect((server.host.as_str(), server.port))
            .await
            .ok()?;
        stream.write_all(&SSL_REQUEST).await.ok()?;
        let mut answer = [0u8; 1];
        match stream.read(&mut answer).await.ok()? {
            0 => None,
            _ => Some(matches!(answer[0], b'S' | b'N' | b'E')),
        }
    };
    tokio::time::timeout(within, probe).await.ok().flatten()
}

/// Says what went wrong when connecting failed, naming the server (`host:port`, never the
/// password). On TLS, as [`Error::InvalidConfig`] (trying again with the same URL cannot
/// succeed): a server certificate that the trusted CAs did not sign (or that is for another
/// host name, or expired) is "not trusted"; a server that does not speak TLS while `sslmode`
/// asks for it is said so. A server that answered something other than PostgreSQL's protocol
/// (another kind of server at that port) is [`Error::InvalidConfig`] too. Every other error
/// keeps its variant, the server in front of its message.
pub(crate) fn connect_failure(server: &[HostPort], error: Error) -> Error {
    let server = server
        .first()
        .map_or_else(|| "the server".to_owned(), |s| format!("server {s}"));
    let source = match &error {
        Error::Unavailable {
            source: Some(source),
            ..
        }
        | Error::Backend {
            source: Some(source),
            ..
        } => source.downcast_ref::<sqlx::Error>(),
        _ => None,
    };
    let message = match source {
        Some(sqlx::Error::Tls(e)) => format!(
            "Postgres {server}: TLS could not be set up ({e}); the URL's sslmode asks for \
             TLS: turn `ssl = on` at the server, or use sslmode=prefer or disable"
        ),
        Some(sqlx::Error::Io(io)) => match untrusted(io) {
            Some(why) => format!(
                "Postgres {server}: its TLS certificate was not trusted ({why}); trust the CA \
                 that signed it with `sslrootcert=/path/ca.pem`"
            ),
            None => return error.in_context(&format!("Postgres {server}")),
        },
        Some(sqlx::Error::Protocol(_)) => format!(
            "Postgres {server}: not a PostgreSQL server (it answered something other than the \
             PostgreSQL protocol)"
        ),
        _ => return error.in_context(&format!("Postgres {server}")),
    };
    let (Error::Unavailable { source, .. } | Error::Backend { source, .. }) = error else {
        unreachable!("matched above")
    };
    Error::InvalidConfig { message, source }
}

/// What rustls found wrong with the server's certificate, when that is the I/O error.
#[cfg(feature = "tls")]
fn untrusted(io: &std::io::Error) -> Option<String> {
    match io.get_ref()?.downcast_ref::<rustls::Error>()? {
        rustls::Error::InvalidCertificate(why) => Some(format!("{why:?}")),
        _ => None,
    }
}

#[cfg(not(feature = "tls"))]
fn untrusted(_: &std::io::Error) -> Option<String> {
    None
}
