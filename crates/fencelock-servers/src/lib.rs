#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

pub mod members;
pub mod moto;
pub mod port;
pub mod proxy;
pub mod set;
