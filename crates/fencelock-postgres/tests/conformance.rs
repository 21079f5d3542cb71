//! The shared conformance suite, once per Postgres backend.

mod common;

mod lease {
    fencelock_conformance::conformance_suite!(crate::common::lease_setup());
}

mod advisory {
    fencelock_conformance::conformance_suite!(crate::common::advisory_setup());
}
