//! The listening sockets that go with the gateway's runtimes (`taskgate_shared::runtime`).
//!
//! With `per-core`, each single-threaded runtime has its own listening socket (`SO_REUSEPORT`:
//! the kernel spreads new connections over them) and its own Redis connection, so a request is
//! served start to end on one thread. Background work (the notification hub, the catalogue
//! refresh) runs once, on the first core's runtime.

use std::io;
use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};
pub use taskgate_shared::runtime::{RuntimeArgs, RuntimeSettings, RuntimeShape};

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
