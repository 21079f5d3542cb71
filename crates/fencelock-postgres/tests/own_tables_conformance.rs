//! The storage properties of the conformance suite (DESIGN section 2) on the application's own
//! tables: fenced per resource by `fencelock_admit`, and per row by the row guard.

mod common;

mod admit {
    fencelock_conformance::storage_suite!(crate::common::admit_setup());
}

mod row_guard {
    fencelock_conformance::storage_suite!(crate::common::row_guard_setup());
}
