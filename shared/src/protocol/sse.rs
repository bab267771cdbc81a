//! Reading Server-Sent Events: the one decoder of the gateway's `text/event-stream` replies that
//! the load tester and the black-box tests share. Sans I/O: the caller pushes the body's chunks
//! as they arrive and takes whole items out, so it works over any HTTP client.
//!
//! It follows the WHATWG event-stream grammar (LF, CRLF or lone CR line ends; `:` comments;
//! `data:` lines joined by `\n`; one optional space after the colon; a leading BOM dropped;
//! unknown fields ignored), with two differences that suit a reader that inspects a stream
//! rather than one that reconnects: comments are returned (tests count keep-alives), and any
//! event that has a field is returned, with the `id:` and `event:` it carried itself (tests
//! check that the gateway sends neither). `retry:` is ignored: neither reader reconnects.

use std::collections::VecDeque;

/// One dispatched event: the fields it carried.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// Its `event:` field, if it had one.
    pub event: Option<String>,
    /// Its `id:` field, if it had one (one holding NUL is ignored, as the grammar says).
    pub id: Option<String>,
    /// Its `data:` lines joined by `\n`; `None` when it had none.
    pub data: Option<String>,
}

/// What a stream yields, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseItem {
    Event(SseEvent),
    /// A `:` line's text after the colon (keep-alives are comments).
    Comment(String),
}

/// Cuts pushed bytes into [`SseItem`]s. Lines are split on the byte, so a chunk may end
/// anywhere, even inside a UTF-8 character or between the CR and LF of one line end.
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// The bytes of the line not yet ended.
    line: Vec<u8>,
    /// The previous chunk ended on CR: an LF starting the next one belongs to that line end.
    after_cr: bool,
    /// No line has been read yet (a BOM may lead the first one).
    started: bool,
    /// The event whose blank line has not come yet.
    building: Option<SseEvent>,
    ready: VecDeque<SseItem>,
}

impl SseDecoder {
    /// Feeds the next bytes of the body.
    pub fn push(&mut self, mut chunk: &[u8]) {
        if chunk.is_empty() {
            return;
        }
        if std::mem::take(&mut self.after_cr)
            && let Some(rest) = chunk.strip_prefix(b"\n")
        {
            chunk = rest;
        }
        while let Some(end) = chunk.iter().position(|b| matches!(b, b'\n' | b'\r')) {
            self.line.extend_from_slice(&chunk[..end]);
            let line = std::mem::take(&mut self.line);
            self.read_line(&line);
            let rest = &chunk[end + 1..];
            chunk = if chunk[end] == b'\r' {
                match rest.strip_prefix(b"\n") {
                    Some(rest) => rest,
                    None => {
                        self.after_cr = rest.is_empty();
                        rest
                    }
                }
            } else {
                rest
            };
        }
        self.line.extend_from_slice(chunk);
    }

    /// Marks the end of the body: a last line without its line end, and a last event without
    /// its blank line, are still returned (a reply cut short still shows what it said).
    pub fn finish(&mut self) {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.read_line(&line);
        }
        self.dispatch();
    }

    /// The next whole item, if one has arrived.
    pub fn next_item(&mut self) -> Option<SseItem> {
        self.ready.pop_front()
    }

    fn read_line(&mut self, line: &[u8]) {
        let line = if std::mem::replace(&mut self.started, true) {
            line
        } else {
            line.strip_prefix("\u{feff}".as_bytes()).unwrap_or(line)
        };
        if line.is_empty() {
            return self.dispatch();
        }
        // The gateway writes UTF-8; anything else is replaced rather than dropped, as the
        // grammar says, so a bad byte shows up in what the reader sees.
        let line = String::from_utf8_lossy(line);
        if let Some(comment) = line.strip_prefix(':') {
            self.ready.push_back(SseItem::Comment(comment.to_owned()));
            return;
        }
        let (field, value) = line.split_once(':').unwrap_or((&line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "data" => {
                let event = self.building.get_or_insert_default();
                match &mut event.data {
                    Some(data) => {
                        data.push('\n');
                        data.push_str(value);
                    }
                    None => event.data = Some(value.to_owned()),
                }
            }
            "event" => self.building.get_or_insert_default().event = Some(value.to_owned()),
            "id" if !value.contains('\0') => self.building.get_or_insert_default().id = Some(value.to_owned()),
            _ => {}
        }
    }

    fn dispatch(&mut self) {
        if let Some(event) = self.building.take() {
            self.ready.push_back(SseItem::Event(event));
        }
    }
}

/// Every item of a whole body, ended or not.
pub fn decode(body: &[u8]) -> Vec<SseItem> {
    let mut decoder = SseDecoder::default();
    decoder.push(body);
    decoder.finish();
    std::iter::from_fn(|| decoder.next_item()).collect()
}

/// The `data` of every event of a whole body, in order (comments and data-less events skipped).
pub fn data_of(body: &[u8]) -> Vec<String> {
    decode(body)
        .into_iter()
        .filter_map(|item| match item {
            SseItem::Event(event) => event.data,
            SseItem::Comment(_) => None,
        })
        .collect()
}

#[cfg(test)]
mod tests;
