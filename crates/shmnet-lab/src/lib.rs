//! # shmnet-lab: the instruments
//!
//! The calibrated TSC ([`tsc`]), a record of the machine ([`machine`]), and the benchmarks
//! ([`bench`]). Later: the residency probe and the experiments of the source documents.
//! Everything here measures; nothing here is on the data path.

#![warn(missing_docs)]

pub mod bench;
pub mod machine;
pub mod tsc;
