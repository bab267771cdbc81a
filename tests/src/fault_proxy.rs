//! A TCP proxy between one process and Redis that can partition, slow down or cut that
//! process's connections while the process keeps running: the faults leases and fencing exist
//! for, which killing a process never produces.
//!
//! A partition *stalls* both directions: bytes already sent wait in the proxy and in the
//! kernel, as they would behind a dead link, and nothing is dropped from the middle of a
//! stream (TCP never does that; a client seeing half a reply would be a harness bug, not a
//! fault). Healing lets the stalled bytes through; cutting closes every connection, as a link
//! that stayed down long enough for the peers to give up.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does to the bytes it forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward at once.
    None,
    /// Forward nothing, in either direction, until healed.
    Partition,
    /// Hold each chunk this long before forwarding it.
    Delay(Duration),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct State {
    fault: Fault,
    /// Bumped by [`FaultProxy::cut`]: connections of an older generation close.
    generation: u64,
    /// Cut every connection right after forwarding the reply to a request containing these
    /// bytes (once).
    cut_after_reply_to: Option<Vec<u8>>,
    /// With `cut_after_reply_to`: drop that reply instead of forwarding it (the server answered;
    /// the client never hears it).
    drop_reply: bool,
}

/// Client chunks (what one read from the client returned) that contained a watched pattern.
type Captured = Arc<std::sync::Mutex<Vec<Vec<u8>>>>;

/// A running proxy; stops (and closes its connections) when dropped.
pub struct FaultProxy {
    port: u16,
    state: Arc<watch::Sender<State>>,
    captured: Captured,
    accept: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `target`.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("the proxy binds");
        let port = listener.local_addr().expect("bound").port();
        let (state, _) =
            watch::channel(State { fault: Fault::None, generation: 0, cut_after_reply_to: None, drop_reply: false });
        let state = Arc::new(state);
        let captured = Captured::default();
        let (accepting, capturing) = (state.clone(), captured.clone());
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (state, captured) = (accepting.clone(), capturing.clone());
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else { return };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    connect(client, server, state, captured).await;
                });
            }
        });
        Self { port, state, captured, accept }
    }

    /// The proxy's address as a Redis URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stalls every connection, and every new one, until [`FaultProxy::heal`].
    pub fn partition(&self) {
        self.set(Fault::Partition);
    }

    /// Adds `delay` to each chunk in each direction.
    pub fn delay(&self, delay: Duration) {
        self.set(Fault::Delay(delay));
    }

    /// Forwards normally again; stalled bytes go through.
    pub fn heal(&self) {
        self.set(Fault::None);
    }

    /// Closes every open connection (new ones are accepted, subject to the current fault).
    pub fn cut(&self) {
        self.state.send_modify(|s| s.generation += 1);
    }

    /// Once a request containing `pattern` has gone through, cuts every connection right
    /// after the next reply chunk from Redis on that connection: the client has its answer to
    /// that request and loses the connection before it can send anything else on it.
    pub fn cut_after_reply_to(&self, pattern: &[u8]) {
        self.state.send_modify(|s| s.cut_after_reply_to = Some(pattern.to_vec()));
    }

    /// Once a request containing `pattern` has gone through, drops the next reply chunk on that
    /// connection and cuts every connection: the server has answered (a task was made, say),
    /// and the client loses the answer with the connection.
    pub fn drop_reply_to(&self, pattern: &[u8]) {
        self.state.send_modify(|s| {
            s.cut_after_reply_to = Some(pattern.to_vec());
            s.drop_reply = true;
        });
    }

    /// The client chunks seen so far that contained the pattern of
    /// [`FaultProxy::cut_after_reply_to`]: what the client wrote together with it.
    pub fn captured(&self) -> Vec<Vec<u8>> {
        self.captured.lock().expect("not poisoned").clone()
    }

    pub fn fault(&self) -> Fault {
        self.state.borrow().fault
    }

    fn set(&self, fault: Fault) {
        self.state.send_modify(|s| s.fault = fault);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// Pumps both directions until either side closes or the connection is cut.
async fn connect(client: TcpStream, server: TcpStream, state: Arc<watch::Sender<State>>, captured: Captured) {
    let generation = state.borrow().generation;
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let up = pump(client_read, server_write, &state, generation, Direction::Up(armed.clone(), captured));
    let down = pump(server_read, client_write, &state, generation, Direction::Down(armed));
    // When one direction ends, drop both halves of both sockets.
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}

/// Which way a pump forwards, with the connection's "cut after the next reply" flag.
enum Direction {
    Up(Arc<std::sync::atomic::AtomicBool>, Captured),
    Down(Arc<std::sync::atomic::AtomicBool>),
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    sender: &watch::Sender<State>,
    generation: u64,
    direction: Direction,
) {
    use std::sync::atomic::Ordering;
    let mut state = sender.subscribe();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            () = cut(&mut state, generation) => return,
        };
        // Hold the chunk while partitioned; give up if cut meanwhile.
        let delay = loop {
            let current = state.borrow_and_update().clone();
            if current.generation != generation {
                return;
            }
            match current.fault {
                Fault::Partition => {
                    if state.changed().await.is_err() {
                        return;
                    }
                }
                Fault::Delay(delay) => break Some(delay),
                Fault::None => break None,
            }
        };
        if let Some(delay) = delay {
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = cut(&mut state, generation) => return,
            }
        }
        if let Direction::Up(armed, captured) = &direction {
            let matches = state.borrow().cut_after_reply_to.as_deref().is_some_and(|p| contains(&buf[..n], p));
            if matches {
                captured.lock().expect("not poisoned").push(buf[..n].to_vec());
                armed.store(true, Ordering::SeqCst);
            }
        }
        if let Direction::Down(armed) = &direction
            && armed.load(Ordering::SeqCst)
            && state.borrow().drop_reply
        {
            sender.send_modify(|s| {
                s.cut_after_reply_to = None;
                s.drop_reply = false;
                s.generation += 1;
            });
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
        if let Direction::Down(armed) = &direction
            && armed.load(Ordering::SeqCst)
        {
            sender.send_modify(|s| {
                s.cut_after_reply_to = None;
                s.generation += 1;
            });
            return;
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// Resolves once the connection's generation has been cut.
async fn cut(state: &mut watch::Receiver<State>, generation: u64) {
    loop {
        if state.borrow_and_update().generation != generation {
            return;
        }
        if state.changed().await.is_err() {
            return;
        }
    }
}
