//! The conformance suite on real etcd: one member, and a cluster of three.

mod common;

mod one_member {
    fencelock_conformance::conformance_suite!(super::common::setup(1));
}

mod three_members {
    fencelock_conformance::conformance_suite!(super::common::setup(3));
}
