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

/// Whether `host` (a name, an address, or a Unix socket path) is this machine: `localhost`,
/// a loopback address, or a socket path.
pub fn is_local_host(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.starts_with('/')
        || host.is_empty()
        || bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Whether a password would cross the network to a server that is not checked: a URL with a
/// password, a host off this machine, and a connection that is plain or does not verify the
/// server's certificate (`server_checked` false). Backends warn at connect when so: anyone
/// on the path, or a server posing as this one, could read the password.
pub fn password_exposed(has_password: bool, host: &str, server_checked: bool) -> bool {
    has_password && !server_checked && !is_local_host(host)
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
    fn a_password_is_exposed_only_off_this_machine_and_unchecked() {
        for local in [
            "localhost",
            "127.0.0.1",
            "127.9.9.9",
            "::1",
            "[::1]",
            "/run/postgresql",
        ] {
            assert!(!password_exposed(true, local, false), "{local}");
        }
        assert!(password_exposed(true, "db.example", false));
        assert!(password_exposed(true, "10.0.0.7", false));
        assert!(!password_exposed(true, "db.example", true));
        assert!(!password_exposed(false, "db.example", false));
    }

    #[test]
    fn displays_as_urls_write_it() {
        assert_eq!(
            HostPort::new("db.example", 5432).to_string(),
            "db.example:5432"
        );
        assert_eq!(HostPort::new("::1", 6379).to_string(), "[::1]:6379");
    }
}
