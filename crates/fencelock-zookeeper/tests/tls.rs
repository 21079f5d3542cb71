//! TLS tests.
