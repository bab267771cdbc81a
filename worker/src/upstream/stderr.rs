//! A stdio child's stderr, copied into the worker's log with the server's name: bounded per
//! line and per second, so that a chatty or hostile server can neither flood the log nor make
//! the worker buffer without end. The child never waits on us: what is over the rate is read
//! and dropped, and the number dropped is logged when its second ends.

use std::time::Duration;

use bytes::BytesMut;
use futures::StreamExt as _;
use tokio::time::Instant;
use tokio_util::codec::{Decoder, FramedRead};

/// Longest stderr line kept (the rest of a longer line is skipped), and lines logged per
/// second per child.
pub(super) const LINE_BYTES: usize = 2048;
pub(super) const LINES_PER_SEC: u32 = 50;

pub(super) async fn forward(upstream: String, instance: u16, stderr: tokio::process::ChildStderr) {
    let mut lines = FramedRead::new(stderr, BoundedLines::default());
    let mut window = Instant::now() + Duration::from_secs(1);
    let (mut logged, mut dropped) = (0u32, 0u64);
    loop {
        let line = tokio::select! {
            line = lines.next() => line,
            () = tokio::time::sleep_until(window), if dropped > 0 => {
                report_dropped(&upstream, instance, &mut dropped);
                continue;
            }
        };
        let Some(Ok(line)) = line else {
            report_dropped(&upstream, instance, &mut dropped);
            return;
        };
        let now = Instant::now();
        if now >= window {
            report_dropped(&upstream, instance, &mut dropped);
            window = now + Duration::from_secs(1);
            logged = 0;
        }
        if logged >= LINES_PER_SEC {
            dropped += 1;
            continue;
        }
        logged += 1;
        let line = String::from_utf8_lossy(&line);
        tracing::info!(upstream = %upstream, instance, stderr = %line.trim_end(), "upstream stderr");
    }
}

fn report_dropped(upstream: &str, instance: u16, dropped: &mut u64) {
    if *dropped > 0 {
        tracing::warn!(upstream = %upstream, instance, dropped = *dropped, "upstream stderr lines dropped (rate limit)");
        *dropped = 0;
    }
}

/// Newline-separated lines of at most [`LINE_BYTES`]: a longer line yields its head and the
/// rest is discarded up to its newline, so memory stays bounded whatever the child writes.
#[derive(Default)]
struct BoundedLines {
    discarding: bool,
}

impl Decoder for BoundedLines {
    type Item = BytesMut;
    type Error = std::io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, std::io::Error> {
        loop {
            match src.iter().position(|b| *b == b'\n') {
                Some(end) => {
                    let mut line = src.split_to(end + 1);
                    if std::mem::take(&mut self.discarding) {
                        continue;
                    }
                    line.truncate(end.min(LINE_BYTES));
                    return Ok(Some(line));
                }
                None if self.discarding => {
                    src.clear();
                    return Ok(None);
                }
                None if src.len() >= LINE_BYTES => {
                    self.discarding = true;
                    return Ok(Some(src.split_to(LINE_BYTES)));
                }
                None => return Ok(None),
            }
        }
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, std::io::Error> {
        match self.decode(src)? {
            Some(line) => Ok(Some(line)),
            None if src.is_empty() || self.discarding => Ok(None),
            None => Ok(Some(src.split())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(input: &[u8]) -> Vec<Vec<u8>> {
        let mut codec = BoundedLines::default();
        let mut src = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(line) = codec.decode_eof(&mut src).unwrap() {
            out.push(line.to_vec());
        }
        out
    }

    #[test]
    fn lines_are_split_and_the_last_one_kept_without_newline() {
        assert_eq!(decode_all(b"one\ntwo\nthree"), vec![b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]);
    }

    #[test]
    fn an_overlong_line_keeps_its_head_and_skips_its_tail() {
        let mut input = vec![b'x'; LINE_BYTES * 3];
        input.extend_from_slice(b"\nnext\n");
        let lines = decode_all(&input);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].len(), LINE_BYTES);
        assert_eq!(lines[1], b"next");
    }

    #[test]
    fn an_overlong_line_read_whole_is_cut_too() {
        let mut input = vec![b'z'; LINE_BYTES + 500];
        input.push(b'\n');
        assert_eq!(decode_all(&input), vec![vec![b'z'; LINE_BYTES]]);
    }

    #[test]
    fn a_tail_split_across_reads_is_still_skipped() {
        let mut codec = BoundedLines::default();
        let mut src = BytesMut::from(&vec![b'y'; LINE_BYTES + 10][..]);
        assert_eq!(codec.decode(&mut src).unwrap().unwrap().len(), LINE_BYTES);
        assert!(codec.decode(&mut src).unwrap().is_none());
        src.extend_from_slice(b"more tail\nkept\n");
        assert_eq!(codec.decode(&mut src).unwrap().unwrap().to_vec(), b"kept".to_vec());
    }
}
