//! # shmnet-lab: the instruments
//!
//! The calibrated TSC ([`tsc`]), a record of the machine ([`machine`]), this machine's Table 1
//! ([`calibrate`], on the primitives of [`mem`] and the cache sizes of [`cacheinfo`]), seed
//! 000's residency experiment ([`residency`]: the probe, the synthetic load, the summary) and
//! its suite ([`suite`]), and the benchmarks ([`bench`](mod@bench), [`netbench`], with the run's
//! [`scoreboard`] and softnic's parts in a run, [`softnic_roles`]). Everything here
//! measures; nothing here is on the data path. The probe, the calibrator and their memory
//! primitives are written here rather than taken from a crate because they are the subject
//! of the work: what they touch, in what order, is the measurement.

#![warn(missing_docs)]

pub mod bench;
pub mod buffers;
pub mod cacheinfo;
pub mod calibrate;
pub mod cpuid;
/// Grouped bar charts normalised to the fastest bar of each group, as PNG.
pub mod handles;
pub mod machine;
pub mod mem;
pub mod netbench;
pub mod plot;
pub mod residency;
pub mod scoreboard;
pub mod servers;
pub mod signature;
pub mod softnic_roles;
pub mod suite;
pub mod tcp_setup;
pub mod tsc;
