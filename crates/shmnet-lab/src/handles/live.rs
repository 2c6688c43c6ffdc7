//! A protocol server in this process for the lab's live experiments (Fig. 4, and the traces
//! of shmnet's own runs): a loopback softnic, `--isolation regions`, stepped on a thread
//! until it is finished or dropped.

use shmnet_chan::PageSize;
use shmnet_io::driver::softnic::{Softnic, SoftnicConfig};
use shmnet_io::inline::ServeConfig;
use shmnet_io::server::{HandleTrace, Placement, Server, ServerError, ServerOptions};
use shmnet_io::spec::{Isolation, OnMiss};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The server's address on its loopback wire.
pub const US: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);

/// Why a live server could not start.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The loopback softnic could not be made.
    #[error("the loopback softnic: {0}")]
    Softnic(String),
    /// The server could not start.
    #[error("starting the server: {0}")]
    Server(#[from] ServerError),
}

/// A running server; see the [module docs](self).
pub struct Running {
    /// Its control socket.
    pub path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<HandleTrace>>,
}

impl Running {
    /// Starts one, `tag` naming its socket; recording up to `record` handle pages if given.
    pub fn start(tag: &str, on_miss: OnMiss, record: Option<usize>) -> Result<Self, LiveError> {
        let path =
            std::env::temp_dir().join(format!("shmnet-lab-{}-{tag}.sock", std::process::id()));
        let nic = Softnic::new(SoftnicConfig {
            loopback: true,
            ..SoftnicConfig::default()
        })
        .map_err(|e| LiveError::Softnic(e.to_string()))?;
        let mut server = Server::start(
            nic,
            &ServerOptions {
                serve: ServeConfig {
                    ip: US,
                    loopback: true,
                    rx_queue_limit: 1024,
                    ..ServeConfig::default()
                },
                socket: path.clone(),
                page: PageSize::Small,
                ipc: false,
                isolation: Isolation::Regions,
                on_miss,
                sync: Default::default(),
                placement: Placement::Polled,
                limits: Default::default(),
            },
        )?;
        if let Some(n) = record {
            server.record_handles(n);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                if server.step() == 0 {
                    server.idle(Duration::from_millis(1));
                }
            }
            server.take_handle_trace()
        });
        Ok(Self {
            path,
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the server and returns what it recorded.
    pub fn finish(mut self) -> HandleTrace {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}
