//! The settings a MySQL URL chooses by name: the lock backend (`?backend=`) and how a
//! connection uses TLS (`?ssl-mode=`, with `?ssl-ca=`), and the check of the TLS settings.

use std::fmt;
use std::str::FromStr;

use fencelock_core::{Error, Result};

/// The lock backend a [`MySqlConfig`](crate::MySqlConfig) chooses with `?backend=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum MySqlBackendKind {
    /// `get_lock` (default): [`MySqlLockBackend`](crate::MySqlLockBackend), session locks taken
    /// with `GET_LOCK`, interoperable with plain SQL clients.
    #[default]
    GetLock,
}

impl MySqlBackendKind {
    /// Every kind, in the order the docs list them.
    pub const ALL: &'static [MySqlBackendKind] = &[MySqlBackendKind::GetLock];

    /// The name used in `?backend=`.
    pub fn as_str(self) -> &'static str {
        match self {
            MySqlBackendKind::GetLock => "get_lock",
        }
    }
}

impl fmt::Display for MySqlBackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for MySqlBackendKind {
    type Err = Error;

    /// `get_lock`; anything else is [`Error::InvalidConfig`].
    fn from_str(s: &str) -> Result<Self> {
        MySqlBackendKind::ALL
            .iter()
            .copied()
            .find(|kind| kind.as_str() == s)
            .ok_or_else(|| {
                Error::config(format!(
                    "unknown MySQL backend {s:?}: the only one is `get_lock`"
                ))
            })
    }
}

/// How a connection uses TLS (the URL's `ssl-mode`, MySQL's own names, `-` or `_` alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MySqlTlsMode {
    /// `disabled`: plain TCP.
    Disabled,
    /// `preferred` (the default without `ssl-ca`): TLS when the server offers it, its
    /// certificate not checked; plain TCP otherwise. Protects against a passive listener only.
    Preferred,
    /// `required`: TLS or no connection; the certificate is not checked.
    Required,
    /// `verify_ca` (the default with `ssl-ca`, and what `required` becomes with it, as in
    /// libpq): TLS, the certificate signed by `ssl-ca` (or a public CA); the host not checked.
    VerifyCa,
    /// `verify_identity`: TLS, the certificate signed by `ssl-ca` (or a public CA) for the
    /// URL's host.
    VerifyIdentity,
}

impl MySqlTlsMode {
    /// The name used in `ssl-mode=`.
    pub fn as_str(self) -> &'static str {
        match self {
            MySqlTlsMode::Disabled => "disabled",
            MySqlTlsMode::Preferred => "preferred",
            MySqlTlsMode::Required => "required",
            MySqlTlsMode::VerifyCa => "verify_ca",
            MySqlTlsMode::VerifyIdentity => "verify_identity",
        }
    }

    /// Whether the server's certificate is checked against a CA.
    pub fn verifies(self) -> bool {
        matches!(self, MySqlTlsMode::VerifyCa | MySqlTlsMode::VerifyIdentity)
    }

    pub(super) fn sqlx(self) -> sqlx::mysql::MySqlSslMode {
        use sqlx::mysql::MySqlSslMode;
        match self {
            MySqlTlsMode::Disabled => MySqlSslMode::Disabled,
            MySqlTlsMode::Preferred => MySqlSslMode::Preferred,
            MySqlTlsMode::Required => MySqlSslMode::Required,
            MySqlTlsMode::VerifyCa => MySqlSslMode::VerifyCa,
            MySqlTlsMode::VerifyIdentity => MySqlSslMode::VerifyIdentity,
        }
    }
}

impl FromStr for MySqlTlsMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let name = s.to_ascii_lowercase().replace('-', "_");
        [
            MySqlTlsMode::Disabled,
            MySqlTlsMode::Preferred,
            MySqlTlsMode::Required,
            MySqlTlsMode::VerifyCa,
            MySqlTlsMode::VerifyIdentity,
        ]
        .into_iter()
        .find(|mode| mode.as_str() == name)
        .ok_or_else(|| {
            Error::config(format!(
                "unknown ssl-mode {s:?}: use disabled, preferred, required, verify_ca or \
                 verify_identity"
            ))
        })
    }
}

/// Checks the TLS options: a mode that needs TLS in a build without it, and an `ssl-ca` that is
/// not a readable file, are [`Error::InvalidConfig`] naming them.
pub(super) fn check_tls(mode: Option<MySqlTlsMode>, ca: Option<&str>) -> Result<()> {
    let needs_tls = ca.is_some()
        || matches!(
            mode,
            Some(MySqlTlsMode::Required | MySqlTlsMode::VerifyCa | MySqlTlsMode::VerifyIdentity)
        );
    if needs_tls && !cfg!(feature = "tls") {
        return Err(Error::config(
            "ssl-mode and ssl-ca need TLS, which this build of fencelock-mysql lacks: enable \
             its `tls` feature (the command line's `--features tls`)",
        ));
    }
    if matches!(mode, Some(MySqlTlsMode::Disabled)) && ca.is_some() {
        return Err(Error::config(
            "ssl-ca is given with ssl-mode=disabled: drop one of them",
        ));
    }
    if let Some(ca) = ca {
        std::fs::read(ca).map_err(|e| Error::InvalidConfig {
            message: format!("ssl-ca {ca:?} cannot be read: {e}"),
            source: Some(Box::new(e)),
        })?;
    }
    Ok(())
}
