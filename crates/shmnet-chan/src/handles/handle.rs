//! Handles: how an application names its own memory to the server (seed 004's PCH, CBH and
//! VMH), and why the server refuses one.
//!
//! An application registers memfd **regions** with the server; a descriptor then names
//! bytes by **handle**: (application, region, offset, length). The application part is not
//! the application's to choose — the server stamps it from the connection the descriptor
//! came on — so a handle can only ever name its sender's own regions.
//!
//! The server translates handles page by page. A **handle page** numbers one 4 KiB page of
//! an application's registered memory: the region in the high bits, the page within the
//! region in the low [`PAGE_BITS_IN_REGION`] bits. That is the address space the lookup
//! cache indexes (the seed's virtual address in the VMH).

/// Bytes in a page of the handle space (and of the server's mappings).
pub const PAGE_SIZE: u64 = 1 << PAGE_SHIFT;
/// log2 of [`PAGE_SIZE`].
pub const PAGE_SHIFT: u32 = 12;
/// Bits of a handle page that number the page within its region: regions up to 16 TiB.
pub const PAGE_BITS_IN_REGION: u32 = 32;
/// Largest region a handle can reach.
pub const MAX_REGION_BYTES: u64 = 1 << (PAGE_BITS_IN_REGION + PAGE_SHIFT);
/// Most bytes one handle may name: the largest UDP datagram and its header, rounded up. A
/// longer one is refused before any page is looked at (a hostile length cannot make one
/// translation walk a million pages).
pub const MAX_HANDLE_LEN: u32 = 128 << 10;

/// Process communication handle (seed 004's PCH): which application. The server assigns it
/// when the application attaches; `u16::MAX` is never assigned (the lookup cache uses it to
/// mark an empty way).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Pch(pub u16);

impl Pch {
    /// The largest application number the server may assign.
    pub const MAX: u16 = u16::MAX - 1;
}

/// One registered region of an application (the buffer part of seed 004's CBH), numbered
/// by the server at registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct RegionId(pub u16);

/// What the server is about to do with the bytes a handle names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// Read them: a send (the server gathers the application's bytes).
    Read = 0,
    /// Write them: a receive (the server copies a datagram into a posted buffer).
    Write = 1,
}

/// What an application allowed the server to do with a region, fixed at registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, serde::Serialize)]
pub struct Perms {
    /// The server may read it (the application sends from it).
    pub read: bool,
    /// The server may write it (the application receives into it).
    pub write: bool,
}

impl Perms {
    /// Read and write.
    pub const READ_WRITE: Perms = Perms {
        read: true,
        write: true,
    };
    /// Read only: a region the application sends from.
    pub const READ: Perms = Perms {
        read: true,
        write: false,
    };
    /// Write only: a region the application receives into.
    pub const WRITE: Perms = Perms {
        read: false,
        write: true,
    };

    /// Whether `access` is allowed.
    #[inline]
    pub fn allows(self, access: Access) -> bool {
        match access {
            Access::Read => self.read,
            Access::Write => self.write,
        }
    }

    /// The two bits a cache entry keeps them in.
    #[inline]
    pub(crate) fn bits(self) -> usize {
        usize::from(self.read) | usize::from(self.write) << 1
    }
}

/// Bytes of an application's registered memory: seed 004's CBH plus an offset and a length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Handle {
    /// Whose (stamped by the server from the connection, never read from the descriptor).
    pub app: Pch,
    /// Which of its regions.
    pub region: RegionId,
    /// Where in the region the bytes start.
    pub off: u64,
    /// How many.
    pub len: u32,
}

impl Handle {
    /// The handle pages the bytes lie on, first and last; `None` for no bytes, or bytes that
    /// run past the largest region a handle can reach.
    #[inline]
    pub fn page_span(&self) -> Option<(u64, u64)> {
        if self.len == 0 || self.len > MAX_HANDLE_LEN {
            return None;
        }
        let end = self.off.checked_add(u64::from(self.len) - 1)?;
        if end >= MAX_REGION_BYTES {
            return None;
        }
        let base = u64::from(self.region.0) << PAGE_BITS_IN_REGION;
        Some((base | self.off >> PAGE_SHIFT, base | end >> PAGE_SHIFT))
    }
}

/// Why the server refused a handle. Each is counted; none stops the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// No bytes, more than [`MAX_HANDLE_LEN`], or an offset and length that overflow the
    /// handle space.
    #[error("the handle names no bytes, too many, or more than a region can hold")]
    BadRange,
    /// The application has no region by that number.
    #[error("no such registered region")]
    UnknownRegion,
    /// The bytes run past the end of the region.
    #[error("the bytes run past the end of the region")]
    OutOfBounds,
    /// The region was not registered for this access.
    #[error("the region was not registered for this access")]
    Forbidden,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(region: u16, off: u64, len: u32) -> Handle {
        Handle {
            app: Pch(1),
            region: RegionId(region),
            off,
            len,
        }
    }

    #[test]
    fn page_span_covers_first_and_last_byte() {
        assert_eq!(h(0, 0, 1).page_span(), Some((0, 0)));
        assert_eq!(h(0, 4095, 2).page_span(), Some((0, 1)));
        assert_eq!(h(0, 4096, 4096).page_span(), Some((1, 1)));
        assert_eq!(h(3, 8192, 1).page_span(), Some((3 << 32 | 2, 3 << 32 | 2)));
    }

    #[test]
    fn page_span_refuses_empty_and_overflowing_ranges() {
        assert_eq!(h(0, 0, 0).page_span(), None);
        assert_eq!(h(0, 0, MAX_HANDLE_LEN + 1).page_span(), None);
        assert_eq!(h(0, u64::MAX, 2).page_span(), None);
        assert_eq!(
            h(0, MAX_REGION_BYTES - 1, 1)
                .page_span()
                .map(|s| s.0 & 0xffff_ffff),
            Some(0xffff_ffff)
        );
        assert_eq!(h(0, MAX_REGION_BYTES - 1, 2).page_span(), None);
    }

    #[test]
    fn perms_allow_what_was_registered() {
        let ro = Perms {
            read: true,
            write: false,
        };
        assert!(ro.allows(Access::Read) && !ro.allows(Access::Write));
        assert!(Perms::READ_WRITE.allows(Access::Write));
        assert_eq!(Perms::default().bits(), 0);
        assert_eq!(Perms::READ_WRITE.bits(), 3);
    }
}
