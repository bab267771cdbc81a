//! The tokio runtimes the gateway runs on, and the listening sockets that go with them.
//!
//! - `work-stealing` (the default): one multi-threaded runtime. A connection's task and the
//!   Redis connection's reader may run on different threads, and a reply then wakes a task
//!   across threads.
//! - `per-core`: one single-threaded runtime per core, each with its own listening socket
//!   (`SO_REUSEPORT`: the kernel spreads new connections over them) and its own Redis
//!   connection. A request is served start to end on one thread. Background work (the
//!   notification hub, the catalogue refresh) runs once, on the first core's runtime.

use std::io;
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};

use clap::ValueEnum;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::runtime::{Builder, Runtime};

/// How many runtimes, and of which kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RuntimeShape {
    /// One multi-threaded, work-stealing runtime.
    WorkStealing,
    /// One single-threaded runtime per core, each with its own listener and Redis connection.
    PerCore,
}

/// `--runtime` and its tuning.
#[derive(Debug, Clone, Copy)]
pub struct RuntimeSettings {
    pub shape: RuntimeShape,
    /// Threads for `work-stealing`, runtimes for `per-core`; `None`: the cores this process may
    /// use (for `work-stealing`, tokio's choice, which also reads `TOKIO_WORKER_THREADS`).
    pub threads: Option<NonZeroUsize>,
    /// Scheduler ticks between polls of the I/O and timer drivers (tokio's default: 61).
    pub event_interval: Option<NonZeroU32>,
    /// Scheduler ticks between looks at the shared queue (work-stealing only; tokio's default
    /// adapts to the tasks' poll times).
    pub global_queue_interval: Option<NonZeroU32>,
}

impl RuntimeSettings {
    /// The runtime `main` blocks on: the only one, or the first core's.
    pub fn main_runtime(&self) -> io::Result<Runtime> {
        match self.shape {
            RuntimeShape::WorkStealing => {
                let mut builder = Builder::new_multi_thread();
                if let Some(threads) = self.threads {
                    builder.worker_threads(threads.get());
                }
                if let Some(interval) = self.global_queue_interval {
                    builder.global_queue_interval(interval.get());
                }
                self.tuned(&mut builder).build()
            }
            RuntimeShape::PerCore => self.core_runtime(),
        }
    }

    /// One core's single-threaded runtime.
    pub(crate) fn core_runtime(&self) -> io::Result<Runtime> {
        self.tuned(&mut Builder::new_current_thread()).build()
    }

    fn tuned<'b>(&self, builder: &'b mut Builder) -> &'b mut Builder {
        builder.enable_all();
        if let Some(interval) = self.event_interval {
            builder.event_interval(interval.get());
        }
        builder
    }

    /// How many listening sockets (and runtimes serving them) this shape takes.
    pub fn listeners(&self) -> usize {
        match self.shape {
            RuntimeShape::WorkStealing => 1,
            RuntimeShape::PerCore => {
                self.threads.unwrap_or_else(|| std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN)).get()
            }
        }
    }
}

/// Binds `count` listening sockets to `addr`; with more than one, they share the port through
/// `SO_REUSEPORT` (port 0 picks one free port for all of them).
pub fn bind(addr: SocketAddr, count: usize) -> io::Result<Vec<std::net::TcpListener>> {
    let first = listener(addr, count > 1)?;
    let bound = first.local_addr()?;
    let mut listeners = vec![first];
    for _ in 1..count {
        listeners.push(listener(bound, true)?);
    }
    Ok(listeners)
}

fn listener(addr: SocketAddr, reuse_port: bool) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    // As tokio's own `TcpListener::bind`: a restarted gateway may bind over TIME_WAIT sockets.
    socket.set_reuse_address(true)?;
    if reuse_port {
        socket.set_reuse_port(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_core_listeners_share_one_port() {
        let listeners = bind("127.0.0.1:0".parse().unwrap(), 3).unwrap();
        let ports: Vec<u16> = listeners.iter().map(|l| l.local_addr().unwrap().port()).collect();
        assert_eq!(ports.len(), 3);
        assert!(ports.iter().all(|&p| p == ports[0] && p != 0), "{ports:?}");
    }

    #[test]
    fn one_listener_does_not_share_its_port() {
        let listeners = bind("127.0.0.1:0".parse().unwrap(), 1).unwrap();
        let port = listeners[0].local_addr().unwrap().port();
        assert!(bind(format!("127.0.0.1:{port}").parse().unwrap(), 1).is_err());
    }
}
