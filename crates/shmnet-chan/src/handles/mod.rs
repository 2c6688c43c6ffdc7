//! Registered regions and handle lookup: how the server reaches an application's memory
//! without the application reaching anyone else's (seed 004, *Dynamic Handle Lookup in
//! Modern Network Interfaces*, moved from the NIC into the protocol server).
//!
//! Each application owns its memory: it creates memfd regions and registers them with the
//! server ([`table::RegionTable::register`]), which maps them. Its descriptors then name
//! bytes by [`handle::Handle`] — (application, region, offset, length) — never by address or
//! by shared offset, and the application part is stamped by the server from the connection.
//! The data plane translates handles through a small set-associative
//! [`cache::LookupCache`] (the seed's VMH cache: C entries, lines of L, A ways, LRU, the
//! application in the tag), backed by the table; a miss does not stall the data plane: it is
//! reported through [`miss::MissPort`] and served by a miss thread ([`miss::MissService`]),
//! which pins the line's pages and sends the line back.
//!
//! Nothing here knows of packets; the server decides what a miss costs the request (drop it
//! and let the sender retry, the seed's choice, or hold it until the line arrives).

pub mod cache;
pub mod handle;
pub mod miss;
pub mod region;
pub mod table;

pub use cache::{
    CacheGeometry, LineKey, LookupCache, LookupError, LookupStats, SetIndex, Translation,
};
pub use handle::{Access, Handle, Pch, Perms, Refusal, RegionId};
pub use miss::{Fill, MissEvent, MissPort, MissPortStats, MissService, Reported, miss_channel};
pub use region::{Region, RegionError};
pub use table::{RegionTable, RegisterError, Served, TableLimits, TableStats};
