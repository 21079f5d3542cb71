//! Connect errors, classified: TLS set-up, an untrusted certificate, not PostgreSQL.

use fencelock_core::{Error, HostPort};

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
