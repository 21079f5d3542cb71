//! The TLS file options of a backend URL: `tls`, `tls_ca`, `tls_cert` and `tls_key`.

use std::path::PathBuf;

use crate::error::{Error, Result};

use super::Options;

/// The PEM files a backend URL names for TLS (`?tls=true&tls_ca=/ca.pem[&tls_cert=..&tls_key=..]`):
/// paths only, with the rules every backend that takes them shares. Reading the files and
/// checking host names is the backend's part (each does it with its own TLS library), as is
/// saying whether TLS is built in.
///
/// ```
/// use fencelock_core::url::{Known, Options, TlsFiles};
/// const KNOWN: &[Known] =
///     &[Known::new("tls"), Known::new("tls_ca"), Known::new("tls_cert"), Known::new("tls_key")];
/// let options = Options::parse("tls=true&tls_ca=%2Fetc%2Fca.pem", KNOWN)?;
/// let files = TlsFiles::from_options(&options)?.expect("tls=true");
/// files.check()?;
/// assert_eq!(files.url_options(), [("tls", "true".to_owned()), ("tls_ca", "/etc/ca.pem".to_owned())]);
/// assert!(TlsFiles::from_options(&Options::parse("tls_ca=/ca.pem", KNOWN)?).is_err());
/// assert!(TlsFiles::default().check().is_err()); // no tls_ca
/// # Ok::<(), fencelock_core::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// `tls_ca`: the CA certificates the servers' certificates must chain to.
    pub ca: Option<PathBuf>,
    /// `tls_cert`: a client certificate, for servers that ask for one.
    pub cert: Option<PathBuf>,
    /// `tls_key`: the private key of `cert`.
    pub key: Option<PathBuf>,
}

impl TlsFiles {
    /// The URL options of TLS, in the order [`url_options`](Self::url_options) writes them:
    /// a backend that takes them lists each as a [`Known`](super::Known) setting.
    pub const OPTIONS: [&'static str; 4] = ["tls", "tls_ca", "tls_cert", "tls_key"];

    /// The TLS settings of a URL's options: `None` without `tls=true`. Refused with
    /// [`Error::InvalidConfig`] naming the option (never quoting a value): a file option
    /// without `tls=true`, a `tls` other than `true` or `false`, an empty path. The rules of
    /// [`check`](Self::check) are the caller's to apply, after its own (a TLS build, say).
    pub fn from_options(options: &Options) -> Result<Option<Self>> {
        let path = |name: &str| match options.get(name) {
            Some("") => Err(Error::config(format!(
                "option `{name}` is an empty path (a PEM file)"
            ))),
            value => Ok(value.map(PathBuf::from)),
        };
        let files = TlsFiles {
            ca: path("tls_ca")?,
            cert: path("tls_cert")?,
            key: path("tls_key")?,
        };
        match options.get("tls") {
            Some("true") => Ok(Some(files)),
            Some("false") | None if files == TlsFiles::default() => Ok(None),
            Some("false") | None => {
                let given: Vec<&str> = Self::OPTIONS[1..]
                    .iter()
                    .copied()
                    .filter(|name| options.get(name).is_some())
                    .collect();
                Err(Error::config(format!(
                    "option `{}` needs tls=true (the TLS files are used only over TLS)",
                    given.join("`, `")
                )))
            }
            Some(_) => Err(Error::config(
                "option `tls` is `true` or `false` (the value is not shown)",
            )),
        }
    }

    /// Checks the files are enough for TLS, without reading them: a CA named (there are no
    /// built-in roots), and a client certificate and its key together.
    pub fn check(&self) -> Result<()> {
        if self.ca.is_none() {
            return Err(Error::config(
                "tls=true needs tls_ca=/path/ca.pem: the CA certificates the servers' \
                 certificates chain to (there are no built-in roots)",
            ));
        }
        if self.cert.is_some() != self.key.is_some() {
            return Err(Error::config(
                "tls_cert and tls_key go together (a client certificate and its key)",
            ));
        }
        Ok(())
    }

    /// The `(option, value)` pairs a backend's `to_url` writes, not yet encoded: `tls=true`,
    /// then each file given.
    pub fn url_options(&self) -> Vec<(&'static str, String)> {
        let mut pairs = vec![("tls", "true".to_owned())];
        for (name, path) in [
            ("tls_ca", &self.ca),
            ("tls_cert", &self.cert),
            ("tls_key", &self.key),
        ] {
            if let Some(path) = path {
                pairs.push((name, path.to_string_lossy().into_owned()));
            }
        }
        pairs
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::url::Known;

    const KNOWN: &[Known] = &[
        Known::new("tls"),
        Known::new("tls_ca"),
        Known::new("tls_cert"),
        Known::new("tls_key"),
    ];

    fn files(query: &str) -> Result<Option<TlsFiles>> {
        TlsFiles::from_options(&Options::parse(query, KNOWN).unwrap())
    }

    #[test]
    fn file_options_need_tls_true_and_render_back() {
        assert_eq!(files("").unwrap(), None);
        assert_eq!(files("tls=false").unwrap(), None);
        let all = files("tls=true&tls_key=/k&tls_ca=/my%20ca.pem&tls_cert=/c")
            .unwrap()
            .unwrap();
        all.check().unwrap();
        assert_eq!(
            all.url_options(),
            [
                ("tls", "true".to_owned()),
                ("tls_ca", "/my ca.pem".to_owned()),
                ("tls_cert", "/c".to_owned()),
                ("tls_key", "/k".to_owned()),
            ]
        );
        for (query, expected) in [
            ("tls_ca=/ca.pem", "option `tls_ca` needs tls=true"),
            ("tls=false&tls_ca=/ca.pem", "option `tls_ca` needs tls=true"),
            (
                "tls_cert=/c&tls_key=/k",
                "option `tls_cert`, `tls_key` needs tls=true",
            ),
            ("tls=s3cret", "option `tls` is `true` or `false`"),
            ("tls=true&tls_ca=", "option `tls_ca` is an empty path"),
        ] {
            let message = files(query).unwrap_err().to_string();
            assert!(message.contains(expected), "{query:?}: {message}");
            assert!(!message.contains("s3cret"), "{message}");
        }
    }

    #[test]
    fn tls_needs_a_ca_and_a_key_with_its_certificate() {
        for (query, expected) in [
            ("tls=true", "tls=true needs tls_ca=/path/ca.pem"),
            ("tls=true&tls_cert=/c&tls_key=/k", "needs tls_ca"),
            (
                "tls=true&tls_ca=/a&tls_cert=/c",
                "tls_cert and tls_key go together",
            ),
            (
                "tls=true&tls_ca=/a&tls_key=/k",
                "tls_cert and tls_key go together",
            ),
        ] {
            let message = files(query)
                .unwrap()
                .unwrap()
                .check()
                .unwrap_err()
                .to_string();
            assert!(message.contains(expected), "{query:?}: {message}");
        }
    }
}
