//! What a connection is doing, for its head and idle timeouts: requests under way, when the
//! head being read began, when it last had nothing to do.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::config::ConnectionLimits;

/// The HTTP/2 connection preface: such a connection sends frames, not heads.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What a connection is doing, for its head and idle timeouts. Times are milliseconds since
/// `epoch`.
pub(super) struct Activity {
    epoch: Instant,
    /// Requests whose response has not been sent whole yet.
    underway: AtomicUsize,
    /// When the head being read began; `NONE` when no head is being read.
    head_since: AtomicU64,
    /// When the connection last had nothing under way.
    quiet_since: AtomicU64,
    /// HTTP/2: frames (pings included) are not heads; only the idle timeout applies.
    http2: AtomicBool,
}

const NONE: u64 = u64::MAX;

pub(super) enum Verdict {
    Busy,
    HeadTooSlow,
    Idle,
}

impl Activity {
    pub(super) fn new() -> Self {
        // A new connection owes its first head from the moment it is accepted.
        Self {
            epoch: Instant::now(),
            underway: AtomicUsize::new(0),
            head_since: AtomicU64::new(0),
            quiet_since: AtomicU64::new(0),
            http2: AtomicBool::new(false),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(NONE - 1)
    }

    fn at(&self, ms: u64) -> Instant {
        self.epoch + Duration::from_millis(ms)
    }

    /// Bytes arrived: with nothing under way, they begin a head (HTTP/1.1 only).
    pub(super) fn read(&self, bytes: &[u8], first: bool) {
        // "PRI " tells the preface from any HTTP/1.1 method; a shorter first read is taken as
        // HTTP/1.1 (clients send the preface in one write).
        if first && bytes.len() >= 4 && H2_PREFACE.starts_with(&bytes[..bytes.len().min(H2_PREFACE.len())]) {
            // The preface answers the accept's deadline; from here on only idleness counts.
            self.http2.store(true, Ordering::Release);
            self.quiet_since.store(self.now(), Ordering::Release);
            self.head_since.store(NONE, Ordering::Release);
            return;
        }
        if self.http2.load(Ordering::Acquire) || self.underway.load(Ordering::Acquire) > 0 {
            return;
        }
        let _ = self.head_since.compare_exchange(NONE, self.now(), Ordering::AcqRel, Ordering::Acquire);
    }

    /// When to look again: the head's deadline, or the idle deadline, or (while busy) an idle
    /// period from now. Requests are not tracked by wake-ups (that would cost two per request):
    /// looking early is harmless, and on HTTP/1.1 the loop looks at least every half head
    /// timeout, so a head that began meanwhile is cut within one and a half of them.
    pub(super) fn next_check(&self, limits: ConnectionLimits) -> Instant {
        let now = Instant::now();
        let due = if self.underway.load(Ordering::Acquire) > 0 {
            now + limits.idle_timeout
        } else {
            match self.head_since.load(Ordering::Acquire) {
                NONE => self.at(self.quiet_since.load(Ordering::Acquire)) + limits.idle_timeout,
                since => self.at(since) + limits.header_read_timeout,
            }
        };
        if self.http2.load(Ordering::Acquire) { due } else { due.min(now + limits.header_read_timeout / 2) }
    }

    pub(super) fn verdict(&self, limits: ConnectionLimits) -> Verdict {
        if self.underway.load(Ordering::Acquire) > 0 {
            return Verdict::Busy;
        }
        let now = Instant::now();
        match self.head_since.load(Ordering::Acquire) {
            NONE if now >= self.at(self.quiet_since.load(Ordering::Acquire)) + limits.idle_timeout => Verdict::Idle,
            NONE => Verdict::Busy,
            since if now >= self.at(since) + limits.header_read_timeout => Verdict::HeadTooSlow,
            _ => Verdict::Busy,
        }
    }
}

/// One request under way, from its head to the end of its response.
pub(super) struct Underway(Arc<Activity>);

impl Underway {
    pub(super) fn start(activity: Arc<Activity>) -> Self {
        activity.underway.fetch_add(1, Ordering::AcqRel);
        activity.head_since.store(NONE, Ordering::Release);
        Self(activity)
    }
}

impl Drop for Underway {
    fn drop(&mut self) {
        let activity = &self.0;
        activity.quiet_since.store(activity.now(), Ordering::Release);
        activity.underway.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::serve::tests::expired;

    #[test]
    fn a_new_connection_owes_a_head_from_its_accept() {
        assert!(matches!(Activity::new().verdict(expired()), Verdict::HeadTooSlow));
    }

    #[test]
    fn http1_heads_are_timed_and_requests_under_way_are_never_idle() {
        let activity = Arc::new(Activity::new());
        activity.read(b"POST /mcp HTTP/1.1\r\n", true);
        assert!(matches!(activity.verdict(expired()), Verdict::HeadTooSlow));
        let underway = Underway::start(activity.clone());
        activity.read(b"{\"body\": 1}", false);
        assert!(matches!(activity.verdict(expired()), Verdict::Busy), "body bytes are not a head");
        drop(underway);
        assert!(matches!(activity.verdict(expired()), Verdict::Idle));
        activity.read(b"P", false);
        assert!(matches!(activity.verdict(expired()), Verdict::HeadTooSlow), "the next head is timed again");
    }

    #[test]
    fn http2_frames_are_not_heads() {
        let activity = Arc::new(Activity::new());
        activity.read(&H2_PREFACE[..10], true);
        assert!(matches!(activity.verdict(expired()), Verdict::Idle));
        // A PING acknowledgement on an idle connection.
        activity.read(&[0, 0, 8, 6, 1, 0, 0, 0, 0], false);
        assert!(matches!(activity.verdict(expired()), Verdict::Idle));
        let _stream = Underway::start(activity.clone());
        assert!(matches!(activity.verdict(expired()), Verdict::Busy));
    }
}
