//! Test tools for fencelock: real services for real tests. `publish = false`.
