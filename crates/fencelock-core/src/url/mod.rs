//! One URL toolkit for every backend: the rules a backend's URL parser shares with the
//! others, so that a bug class is fixed once.
//!
//! - [`redact`] shows text that may not parse as a URL without ever showing a password
//!   (those of URLs nested in the query included); [`safe_to_echo`] says whether parts of it
//!   may be quoted at all, and [`passwords`] lists what [`redact`] hides, for scrubbing
//!   messages that were not built from a parsed config.
//! - [`UrlParts::split`] splits `scheme://[userinfo@]hosts[/path][?query]`, refusing
//!   another scheme, a fragment and NUL, and [`UrlParts::credentials`] decodes the user
//!   name and password.
//! - [`parse_host`] and [`parse_hosts`] read `host[:port]` lists with a default port and
//!   refuse the same server twice ([`distinct`]); [`port_problem`] words a refused port.
//! - [`Options`] reads a query string, refusing repeated settings (alias spellings
//!   included), unknown names (listing the known ones), values that are not UTF-8 once
//!   percent-decoded, and NUL; a [`Known::indexed`] setting is a family written
//!   `name[index]`, each index given once.
//! - [`decode_part`] decodes a user name, password or database name, refusing NUL and text
//!   that is not UTF-8.
//! - [`TlsFiles`] reads the TLS file options (`tls=true`, `tls_ca`, `tls_cert`, `tls_key`)
//!   with their rules (file options need `tls=true`, which needs a CA; a certificate and its
//!   key together) and renders them back; each backend reads the files with its TLS library.
//!
//! Every refusal is [`Error::InvalidConfig`](crate::Error::InvalidConfig) naming the setting
//! and never showing a password; backends put their own context in front with
//! [`Error::in_context`](crate::Error::in_context).

mod hosts;
mod options;
mod parts;
mod redact;
mod text;
mod tls;

pub use hosts::{distinct, parse_host, parse_hosts, port_problem};
pub use options::{Known, OptionEntry, Options};
pub use parts::UrlParts;
pub use redact::{passwords, redact, safe_to_echo};
pub use text::decode_part;
pub use tls::TlsFiles;

/// The one way a backend's URL config is shown: `Display` is its `redacted_url()` (every
/// password `***`), `FromStr` is its `from_url`, and, given the config's other fields, `Debug`
/// shows the redacted URL and those fields. The type needs `redacted_url(&self) -> String`
/// and `from_url(&str) -> Result<Self>`.
///
/// ```
/// use fencelock_core::{Error, Result};
///
/// #[derive(Clone, PartialEq)]
/// pub struct LockDirConfig {
///     url: String,
///     depth: u8,
/// }
///
/// impl LockDirConfig {
///     pub fn from_url(url: &str) -> Result<Self> {
///         url.starts_with("lockdir://")
///             .then(|| LockDirConfig { url: url.to_owned(), depth: 2 })
///             .ok_or_else(|| Error::config("not a lockdir:// URL"))
///     }
///
///     pub fn redacted_url(&self) -> String {
///         fencelock_core::url::redact(&self.url)
///     }
/// }
///
/// fencelock_core::redacted_config!(LockDirConfig { depth });
///
/// let config: LockDirConfig = "lockdir://user:secret@host/x".parse()?;
/// assert_eq!(config.to_string(), "lockdir://user:***@host/x");
/// assert!(!format!("{config:?}").contains("secret"));
/// # Ok::<(), Error>(())
/// ```
#[macro_export]
macro_rules! redacted_config {
    ($config:ident) => {
        impl ::std::fmt::Display for $config {
            /// The URL with every password replaced by `***`.
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(&self.redacted_url())
            }
        }

        impl ::std::str::FromStr for $config {
            type Err = $crate::Error;
            fn from_str(s: &str) -> $crate::Result<Self> {
                Self::from_url(s)
            }
        }
    };
    ($config:ident { $($field:ident),* $(,)? }) => {
        $crate::redacted_config!($config);

        impl ::std::fmt::Debug for $config {
            // The URL only as redacted, so that a password never reaches a log.
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.debug_struct(stringify!($config))
                    .field("url", &self.redacted_url())
                    $(.field(stringify!($field), &self.$field))*
                    .finish()
            }
        }
    };
}
