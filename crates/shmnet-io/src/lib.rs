//! # shmnet-io: the parties
//!
//! Packet drivers ([`driver`]), the stack's view of shared pools ([`pool`]), and (growing)
//! the protocol server, its control plane and its structures. This is the crate where
//! processes, sockets and devices live; `shmnet-chan` and `shmnet-stack` below it have none.

#![warn(missing_docs)]

pub mod client;
pub mod control;
pub mod driver;
mod driver_host;
pub mod inline;
pub mod pool;
pub mod server;
pub mod spec;
pub mod windows;
