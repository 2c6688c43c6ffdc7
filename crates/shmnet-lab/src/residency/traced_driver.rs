//! A driver that records what its device writes and what the stack will read of each frame
//! (see [`super::trace`]), around any other driver.

use super::trace::{Tracer, Who};
use shmnet_chan::DriverPools;
use shmnet_io::driver::{Driver, DriverStats, RxFrame};
use shmnet_stack::wire::{eth, ipv4, udp};

/// Ethernet + IPv4 header bytes (no options: softnic sends none).
const ETH_IP: usize = eth::HEADER_LEN + ipv4::HEADER_LEN;
/// The UDP header, in a datagram's first fragment.
const UDP: usize = udp::HEADER_LEN;

/// `inner`, recording each received frame.
pub struct TracedDriver<D> {
    inner: D,
    tracer: Tracer,
    checksum: bool,
}

impl<D: Driver> TracedDriver<D> {
    /// Wraps `inner`; `checksum`: the stack reads every UDP byte of each frame.
    pub fn new(inner: D, tracer: Tracer, checksum: bool) -> Self {
        Self {
            inner,
            tracer,
            checksum,
        }
    }

    /// The wrapped driver.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// Takes the records.
    pub fn into_records(self) -> Vec<super::trace::Record> {
        self.tracer.into_records()
    }
}

impl<D: Driver> Driver for TracedDriver<D> {
    fn rx_burst(
        &mut self,
        pools: &mut dyn shmnet_io::driver::RxPools,
        out: &mut Vec<RxFrame>,
        max: usize,
    ) -> std::io::Result<usize> {
        let start = out.len();
        let n = self.inner.rx_burst(pools, out, max)?;
        let Some(pools) = pools.single() else {
            return Ok(n);
        };
        // The device wrote the whole burst before the stack looks at any of it.
        let frames: Vec<(u64, usize, bool)> = out[start..]
            .iter()
            .filter_map(|f| {
                // SAFETY: the driver owns a buffer it has just filled until it hands the frame
                // on (which happens after this call returns).
                let data = unsafe { pools.buffers().data(f.buf) }.ok()?;
                let bytes = &data[..(f.len as usize).min(data.len())];
                let len = bytes.len();
                // A first fragment has fragment offset 0.
                let first = bytes
                    .get(eth::HEADER_LEN..)
                    .and_then(ipv4::peek)
                    .is_some_and(|(_, off)| off == 0);
                Some((bytes.as_ptr() as u64, len, first))
            })
            .collect();
        for &(addr, len, _) in &frames {
            self.tracer.raw(Who::Sender, true, addr, len as u32);
        }
        for &(addr, len, first) in &frames {
            let headers = ETH_IP + if first { UDP } else { 0 };
            let read = if self.checksum { len } else { headers.min(len) };
            self.tracer.raw(Who::Stack, false, addr, read as u32);
        }
        Ok(n)
    }

    fn tx_burst(&mut self, pools: &mut DriverPools, frames: &[u32]) -> std::io::Result<()> {
        self.inner.tx_burst(pools, frames)
    }

    fn rx_fd(&self) -> Option<rustix::fd::BorrowedFd<'_>> {
        self.inner.rx_fd()
    }

    fn idle_hint(&self) -> Option<std::time::Duration> {
        self.inner.idle_hint()
    }

    fn stats(&self) -> DriverStats {
        self.inner.stats()
    }

    fn link(&self) -> shmnet_io::driver::LinkState {
        self.inner.link()
    }

    fn mac(&self) -> [u8; 6] {
        self.inner.mac()
    }

    fn release_held(&mut self, pools: &mut DriverPools) -> u32 {
        self.inner.release_held(pools)
    }
}
