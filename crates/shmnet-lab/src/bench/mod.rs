//! Benchmarks. Each measures its baseline in the same run and reports human tables and JSON;
//! none asserts anything about speed (that is what makes them benchmarks, not tests).

pub mod chan;
pub mod corelat;
pub mod handles;
pub mod handoff;
pub mod stack;
