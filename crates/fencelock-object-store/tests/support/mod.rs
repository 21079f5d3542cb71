//! What the tests of this crate share: the moto server.

pub(crate) mod moto;
