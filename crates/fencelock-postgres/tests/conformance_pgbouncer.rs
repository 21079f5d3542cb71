//! The shared conformance suite through a real PgBouncer in transaction mode: the lease
//! backend and `PgStorage` with `?pooler=transaction`, and the storage properties with the
//! pooler left to detection.

mod common;

mod lease {
    fencelock_conformance::conformance_suite!(crate::common::bouncer::lease_setup("transaction"));
}

mod detected_storage {
    fencelock_conformance::storage_suite!(crate::common::bouncer::detected_storage_setup());
}
