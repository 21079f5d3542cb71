//! The TLS set-up sqlx leaves to the process.

/// sqlx checks a certificate with a verifier built on rustls' process-wide crypto provider,
/// which rustls cannot pick by itself when no provider is installed and the build holds two
/// (ring here, aws-lc-rs through another dependency of the application): the first such
/// connect would panic. Installs ring, the provider this crate's TLS is built with, unless the
/// process has one. Called before every connection fencelock makes from a
/// [`MySqlConfig`](crate::MySqlConfig).
pub(crate) fn ensure_crypto_provider() {
    #[cfg(feature = "tls")]
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another installer leaves that one's provider: fine either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Whether a connect failed on TLS itself: the driver's TLS error (a server without TLS where
/// TLS is required), or the server's certificate refused (rustls' error inside an I/O error).
/// Either is the configuration's to change, not a passing failure.
pub(crate) fn failed_tls(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Tls(_) => true,
        #[cfg(feature = "tls")]
        sqlx::Error::Io(e) => e
            .get_ref()
            .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()),
        _ => false,
    }
}
