//! # shmnet-io: the parties
//!
//! Packet drivers ([`driver`]), the stack's view of shared pools ([`pool`]), the protocol
//! server ([`server`]: a data plane beside a control-plane thread, the driver polled,
//! on a thread or in a process), the control socket ([`control`]), the application side
//! ([`client`]), the one-thread structure ([`inline`]) and the typed specs that start
//! every party ([`spec`]). This is the crate where processes, sockets and devices live;
//! `shmnet-chan` and `shmnet-stack` below it have none.

#![warn(missing_docs)]

pub mod capture;
pub mod client;
mod coarse_clock;
pub mod control;
pub mod driver;
mod driver_host;
pub mod faithful_link;
pub mod inline;
pub mod pool;
pub mod server;
pub mod shared_driver;
pub mod spec;
pub mod windows;
