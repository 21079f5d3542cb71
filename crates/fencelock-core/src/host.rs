//! `HostPort`: one server's address as a backend URL names it.

use std::fmt;

/// One server's address as a backend URL names it: a host name or IP address, and a port.
///
/// Backend configs list the servers they reach with `hosts()` and can be pointed elsewhere with
/// `with_hosts()` (a fault proxy, a test server), so nothing has to rewrite URL strings.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    /// A host name, an IPv4 address, or an IPv6 address without brackets.
    pub host: String,
    /// The TCP port.
    pub port: u16,
}

impl HostPort {
    /// An address from its parts.
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        HostPort {
            host: host.into(),
            port,
        }
    }
}

impl fmt::Display for HostPort {
    /// `host:port`, with an IPv6 address in brackets (`[::1]:6379`), as URLs write it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_as_urls_write_it() {
        assert_eq!(
            HostPort::new("db.example", 5432).to_string(),
            "db.example:5432"
        );
        assert_eq!(HostPort::new("::1", 6379).to_string(), "[::1]:6379");
    }
}
