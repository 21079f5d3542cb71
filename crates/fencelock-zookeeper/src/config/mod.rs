//! `ZkConfig`: the `zookeeper://` grammar, its validation, and the typed settings of a client.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fencelock_core::url::{Known, Options, TlsFiles, UrlParts, parse_hosts, redact, safe_to_echo};
use fencelock_core::{Error, HostPort, Result};
use percent_encoding::{AsciiSet, CONTROLS, percent_decode_str, utf8_percent_encode};

#[cfg(test)]
mod tests;

/// The port a host without one means (ZooKeeper's client port).
pub const DEFAULT_PORT: u16 = 2181;

/// The node under the chroot that holds everything fencelock writes, when the URL names none.
pub const DEFAULT_PREFIX: &str = "fencelock";

/// The session timeout asked for when the URL names none. The server clamps it to its
/// `minSessionTimeout..maxSessionTimeout` (2 and 20 ticks by default: 4 s to 40 s); the
/// negotiated value is the backend's longest ttl.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest prefix accepted, in bytes.
pub const MAX_PREFIX_LEN: usize = 256;

const SCHEME: &str = "zookeeper://";

/// The options of a `zookeeper://` URL.
const KNOWN: &[Known] = &[
    Known::new("session_timeout"),
    Known::new("prefix"),
    Known::new("tls"),
    Known::new("tls_ca"),
    Known::new("tls_cert"),
    Known::new("tls_key"),
];

/// Characters escaped in the user name and password of a rendered URL.
const USERINFO: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'%')
    .add(b'/')
    .add(b':')
    .add(b'?')
    .add(b'@')
    .add(b'#')
    .add(b'&')
    .add(b'=')
    .add(b',')
    .add(b'[')
    .add(b']');

/// Characters escaped in an option value of a rendered URL.
const OPTION: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'%')
    .add(b'&')
    .add(b'=')
    .add(b'#')
    .add(b'+');

/// How to reach a ZooKeeper ensemble, and where fencelock keeps its znodes there.
///
/// ```text
/// zookeeper://[user:password@]host1[:port][,host2[:port],...][/chroot][?session_timeout=30s&prefix=name]
/// ```
///
/// - Hosts: names, IPv4, or IPv6 in brackets; port 2181 when left out.
/// - `user:password`: ZooKeeper `digest` credentials (`addauth digest user:password`); the
///   znodes fencelock creates then carry the creator-only ACL.
/// - `/chroot`: a path that must exist on the ensemble; everything fencelock writes is under it.
/// - `session_timeout`: `<n>ms` or `<n>s`, the session timeout asked for (default 30 s).
/// - `prefix`: one znode name under the chroot (default `fencelock`).
/// - Option values are percent-decoded; a `+` in them is a plus sign, not a space.
/// - `tls=true` (feature `tls`): every member over TLS; `tls_ca=/path/ca.pem` (required with
///   it) names the PEM file of the CA certificates the servers' certificates must chain to,
///   for the host names of the URL; `tls_cert` and `tls_key` (both or neither) a client
///   certificate and its key, for servers that ask for one (`ssl.clientAuth`).
///
/// SASL is not offered: an option naming it is refused as unknown.
///
/// ```
/// use fencelock_zookeeper::ZkConfig;
/// let config = ZkConfig::from_url("zookeeper://zk1,zk2:2182/apps?prefix=orders").unwrap();
/// assert_eq!(config.to_url(), "zookeeper://zk1:2181,zk2:2182/apps?prefix=orders");
/// assert!(ZkConfig::from_url("zookeeper://zk1?tls=true").is_err()); // no tls_ca
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ZkConfig {
    hosts: Vec<HostPort>,
    credentials: Option<(String, String)>,
    chroot: Option<String>,
    session_timeout: Option<Duration>,
    prefix: Option<String>,
    tls: Option<TlsFiles>,
}

impl fmt::Debug for ZkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted_url())
    }
}

fencelock_core::redacted_config!(ZkConfig);

fn invalid(message: impl Into<String>) -> Error {
    Error::config(message)
}

impl ZkConfig {
    /// Parses a `zookeeper://` URL. Everything wrong is [`Error::InvalidConfig`] naming the
    /// setting, after the URL with its password hidden; the message never shows the password.
    pub fn from_url(url: &str) -> Result<Self> {
        let context = format!("zookeeper URL {:?}", redact(url));
        // The split quotes nothing of the URL; what follows may quote a host, a port, an option
        // or the chroot, which may be a piece of the password when an `@` follows a `/` or `?`.
        let parts = UrlParts::split(url, "zookeeper").map_err(|e| e.in_context(&context))?;
        Self::from_parts(parts).map_err(|e| match safe_to_echo(url) {
            true => e.in_context(&context),
            false => Error::config(format!(
                "{context}: refused, without showing why: a user name or password holding \
                 `/`, `?` or `#` must be percent-encoded"
            )),
        })
    }

    fn from_parts(parts: UrlParts<'_>) -> Result<Self> {
        let credentials = parts.credentials()?.map(digest_credentials).transpose()?;
        let hosts = parse_hosts(parts.hosts, DEFAULT_PORT, "host")?;
        for host in &hosts {
            validate_host(&host.host)?;
        }
        let chroot = match parts.path {
            "" | "/" => None,
            path => Some(validate_chroot(path)?),
        };
        // A `+` has always been a plus sign in these options, not form-encoding's space.
        let options = Options::parse(&parts.query.replace('+', "%2B"), KNOWN)?;
        let session_timeout = options.get("session_timeout").map(parse_timeout);
        let prefix = options.get("prefix").map(|prefix| {
            validate_prefix(prefix)?;
            Ok::<_, Error>(prefix.to_owned())
        });
        let config = ZkConfig {
            hosts,
            credentials,
            chroot,
            session_timeout: session_timeout.transpose()?,
            prefix: prefix.transpose()?,
            tls: TlsFiles::from_options(&options)?,
        };
        config.check_tls()?;
        Ok(config)
    }

    /// The whole URL, the password included.
    pub fn to_url(&self) -> String {
        self.render(false)
    }

    /// The URL with the password replaced by `***`.
    pub fn redacted_url(&self) -> String {
        self.render(true)
    }

    fn render(&self, redact: bool) -> String {
        let mut url = String::from(SCHEME);
        if let Some((user, password)) = &self.credentials {
            url.push_str(&utf8_percent_encode(user, USERINFO).to_string());
            url.push(':');
            if redact {
                url.push_str("***");
            } else {
                url.push_str(&utf8_percent_encode(password, USERINFO).to_string());
            }
            url.push('@');
        }
        url.push_str(&self.connect_string_hosts());
        if let Some(chroot) = &self.chroot {
            url.push_str(chroot);
        }
        let mut options = Vec::new();
        if let Some(timeout) = self.session_timeout {
            options.push(format!("session_timeout={}", render_timeout(timeout)));
        }
        if let Some(prefix) = &self.prefix {
            options.push(format!("prefix={}", utf8_percent_encode(prefix, OPTION)));
        }
        for (name, value) in self.tls.iter().flat_map(TlsFiles::url_options) {
            options.push(format!("{name}={}", utf8_percent_encode(&value, OPTION)));
        }
        if !options.is_empty() {
            url.push('?');
            url.push_str(&options.join("&"));
        }
        url
    }

    fn connect_string_hosts(&self) -> String {
        self.hosts
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The connect string ZooKeeper clients take: `host:port,...[/chroot]`.
    pub fn connect_string(&self) -> String {
        let mut s = self.connect_string_hosts();
        if let Some(chroot) = &self.chroot {
            s.push_str(chroot);
        }
        s
    }

    /// The servers, in URL order.
    pub fn hosts(&self) -> Vec<HostPort> {
        self.hosts.clone()
    }

    /// The same config pointed at `hosts` (a fault proxy per member), one per member in the
    /// same order; a different count is [`Error::InvalidConfig`].
    pub fn with_hosts(mut self, hosts: &[HostPort]) -> Result<Self> {
        if hosts.len() != self.hosts.len() {
            return Err(invalid(format!(
                "zookeeper with_hosts needs {} hosts, got {}",
                self.hosts.len(),
                hosts.len()
            )));
        }
        for host in hosts {
            validate_host(&host.host).map_err(|e| e.in_context("zookeeper"))?;
            if host.port == 0 {
                return Err(invalid("zookeeper port 0 is not a port"));
            }
        }
        self.hosts = hosts.to_vec();
        self.check_tls().map_err(|e| e.in_context("zookeeper"))?;
        Ok(self)
    }

    /// With `prefix` as the node that holds fencelock's znodes.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// With `timeout` as the session timeout asked for.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = Some(timeout);
        self
    }

    /// With TLS to every member, trusting the CA certificates in the PEM file at `path` (in
    /// the URL, `?tls=true&tls_ca=/path/ca.pem`). Needs the `tls` feature: without it,
    /// `connect` refuses the config saying so. The file is read at connect.
    pub fn tls_ca(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls.get_or_insert_with(TlsFiles::default).ca = Some(path.into());
        self
    }

    /// With a client certificate and its private key (PEM files) shown to servers that ask
    /// for one (in the URL, `tls_cert=` and `tls_key=`); with [`tls_ca`](Self::tls_ca) only.
    pub fn tls_client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        let tls = self.tls.get_or_insert_with(TlsFiles::default);
        tls.cert = Some(cert.into());
        tls.key = Some(key.into());
        self
    }

    /// Whether the members are reached over TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The CA file trusted for the servers' certificates, with TLS.
    pub fn tls_ca_path(&self) -> Option<&Path> {
        self.tls.as_ref().and_then(|tls| tls.ca.as_deref())
    }

    pub(crate) fn tls_files(&self) -> Option<&TlsFiles> {
        self.tls.as_ref()
    }

    /// Checks the TLS settings without reading the files: the `tls` feature built in, the
    /// rules of [`TlsFiles::check`], and host names TLS can verify.
    fn check_tls(&self) -> Result<()> {
        let Some(tls) = &self.tls else {
            return Ok(());
        };
        if !cfg!(feature = "tls") {
            return Err(invalid(
                "tls=true needs TLS support: enable the `tls` feature of fencelock-zookeeper \
                 (the `tls` feature of the fencelock crate and of the CLI)",
            ));
        }
        tls.check()?;
        #[cfg(feature = "tls")]
        crate::tls::check_hosts(&self.hosts)?;
        Ok(())
    }

    /// The session timeout asked for.
    pub fn session_timeout_value(&self) -> Duration {
        self.session_timeout.unwrap_or(DEFAULT_SESSION_TIMEOUT)
    }

    /// The prefix node's name.
    pub fn prefix_name(&self) -> &str {
        self.prefix.as_deref().unwrap_or(DEFAULT_PREFIX)
    }

    /// The chroot, if any.
    pub fn chroot(&self) -> Option<&str> {
        self.chroot.as_deref()
    }

    /// The digest credentials `user:password`, if any (for `addauth digest`).
    pub(crate) fn digest(&self) -> Option<String> {
        self.credentials
            .as_ref()
            .map(|(user, password)| format!("{user}:{password}"))
    }

    /// The digest user of the credentials, if any.
    pub(crate) fn digest_user(&self) -> Option<&str> {
        self.credentials.as_ref().map(|(user, _)| user.as_str())
    }

    /// Whether the credentials' password would cross to a member off this machine in the
    /// clear (no `tls=true`): what connecting warns about.
    pub(crate) fn password_exposed(&self) -> bool {
        let checked = self.tls_files().is_some();
        self.hosts().iter().any(|member| {
            fencelock_core::password_exposed(self.credentials.is_some(), &member.host, checked)
        })
    }

    /// Checks what the builder methods may have set, as [`from_url`](Self::from_url) does.
    pub(crate) fn validate(&self) -> Result<()> {
        validate_prefix(self.prefix_name())?;
        self.check_tls().map_err(|e| e.in_context("zookeeper"))?;
        let timeout = self.session_timeout_value();
        if timeout < Duration::from_millis(100) || timeout > Duration::from_secs(3600) {
            return Err(invalid(format!(
                "zookeeper session_timeout {timeout:?} is outside 100ms..1h"
            )));
        }
        Ok(())
    }
}

/// The digest credentials of `user:password@`: a password given, a non-empty user without
/// `:`, neither with control characters.
fn digest_credentials((user, password): (String, Option<String>)) -> Result<(String, String)> {
    let Some(password) = password else {
        return Err(invalid(
            "credentials are user:password (digest): the password is missing",
        ));
    };
    if user.is_empty() {
        return Err(invalid("the user name is empty"));
    }
    if user.contains(':') || user.chars().any(char::is_control) {
        return Err(invalid(
            "the user name must not contain ':' or control characters",
        ));
    }
    if password.chars().any(char::is_control) {
        return Err(invalid("the password must not contain control characters"));
    }
    Ok((user, password))
}

/// What ZooKeeper takes of what [`parse_hosts`] accepts: ASCII letters, digits, `.`, `-`,
/// `_` (and the `:` of IPv6), at most 253 bytes.
fn validate_host(host: &str) -> Result<()> {
    let ok = !host.is_empty()
        && host.len() <= 253
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'));
    if ok {
        Ok(())
    } else {
        Err(invalid(format!(
            "host {:?} is not a host name or IP address",
            host.chars().take(64).collect::<String>()
        )))
    }
}

fn validate_chroot(path: &str) -> Result<String> {
    let decoded = percent_decode_str(path)
        .decode_utf8()
        .map_err(|_| invalid("the chroot is not UTF-8"))?;
    let ok = decoded.starts_with('/')
        && !decoded.ends_with('/')
        && decoded[1..]
            .split('/')
            .all(|segment| valid_node_name(segment) && segment != "zookeeper");
    if ok && decoded != path {
        return Err(invalid("the chroot must be written without %-escapes"));
    }
    if !ok {
        return Err(invalid(format!(
            "chroot {:?} is not a ZooKeeper path (/a/b: non-empty names, no \
             trailing /, no . or .., no control characters, not under /zookeeper)",
            decoded.chars().take(64).collect::<String>()
        )));
    }
    Ok(decoded.into_owned())
}

fn valid_node_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name
            .chars()
            .any(|c| c.is_control() || ('\u{e000}'..='\u{f8ff}').contains(&c) || c >= '\u{fff0}')
}

/// Checks a prefix: one znode name (no `/`), at most [`MAX_PREFIX_LEN`] bytes, not `.`,
/// `..` or `zookeeper`, no control characters.
pub fn validate_prefix(prefix: &str) -> Result<()> {
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(invalid(format!(
            "zookeeper prefix is longer than {MAX_PREFIX_LEN} bytes"
        )));
    }
    if !valid_node_name(prefix) || prefix == "zookeeper" {
        return Err(invalid(format!(
            "zookeeper prefix {:?} is not one znode name (non-empty, no /, not . .. or \
             zookeeper, no control characters)",
            prefix.chars().take(64).collect::<String>()
        )));
    }
    Ok(())
}

fn parse_timeout(value: &str) -> Result<Duration> {
    let bad = || {
        invalid(format!(
            "option `session_timeout` {value:?} is not a duration (<n>ms or <n>s, 100ms..1h)"
        ))
    };
    let (digits, unit) = if let Some(ms) = value.strip_suffix("ms") {
        (ms, 1)
    } else if let Some(s) = value.strip_suffix('s') {
        (s, 1000)
    } else {
        return Err(bad());
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 10 {
        return Err(bad());
    }
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let timeout = Duration::from_millis(n.checked_mul(unit).ok_or_else(bad)?);
    if timeout < Duration::from_millis(100) || timeout > Duration::from_secs(3600) {
        return Err(bad());
    }
    Ok(timeout)
}

fn render_timeout(timeout: Duration) -> String {
    let ms = timeout.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}
