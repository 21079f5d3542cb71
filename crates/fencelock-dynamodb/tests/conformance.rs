//! The conformance suite on a real DynamoDB API: moto's server.

mod common;

mod moto {
    fencelock_conformance::conformance_suite!(super::common::setup());
}
