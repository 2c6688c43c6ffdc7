//! # shmnet-lab: the instruments
//!
//! The calibrated TSC ([`tsc`]), a record of the machine ([`machine`]), and the benchmarks
//! ([`bench`]). Later: the residency probe and the experiments of the source documents.
//! Everything here measures; nothing here is on the data path.

#![warn(missing_docs)]

pub mod bench;
pub mod cacheinfo;
pub mod calibrate;
pub mod machine;
pub mod mem;
pub mod netbench;
/// Grouped bar charts normalised to the fastest bar of each group, as PNG.
pub mod plot;
pub mod residency;
pub mod suite;
pub mod tsc;
