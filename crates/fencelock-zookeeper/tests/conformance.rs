//! The conformance suite on real ZooKeeper: one standalone server, and an ensemble of three.

mod common;

mod one_server {
    fencelock_conformance::conformance_suite!(super::common::setup(1));
}

mod three_servers {
    fencelock_conformance::conformance_suite!(super::common::setup(3));
}
