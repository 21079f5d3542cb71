//! The TLS set-up sqlx leaves to the process.

/// sqlx verifies a certificate without its host name (`sslmode=verify-ca`) with a verifier
/// built on rustls' process-wide crypto provider, which rustls cannot pick by itself when no
/// provider is installed and the build holds two (ring here, aws-lc-rs through another
/// dependency of the application): the first such connect panicked. Installs ring, the
/// provider this crate's TLS is built with, unless the process has one. Called before every
/// connection fencelock makes from a [`PgConfig`](crate::PgConfig).
pub(crate) fn ensure_crypto_provider() {
    #[cfg(feature = "tls")]
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another installer leaves that one's provider: fine either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
