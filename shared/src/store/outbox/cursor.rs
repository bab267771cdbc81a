//! The events cursor (docs/events.md, 2.4): where a reader of an owner's outboxes stands, one
//! position per queue shard, and when it was made. Opaque on the wire: `c1.` (the version)
//! and the base64url (no padding) of varints: the shard count `K`, the time `T` (Redis ms) it
//! was made, a bitmap of the shards *drained* at `T` (read to the stream's end), then per
//! shard its position, the last stream id delivered, as the zigzag of its milliseconds minus
//! `T` and its sequence number. Not signed: it names positions in the caller's own streams
//! only, so a forged one can only hurt its maker. Anything else is malformed
//! ([`CursorError`], which callers answer with `InvalidParams`).

use base64::Engine as _;

/// The version prefix of every cursor this module makes.
const PREFIX: &str = "c1.";
/// The most shards a cursor names (the shard count's bound).
pub const MAX_SHARDS: usize = 256;
/// The longest cursor accepted, in characters: 256 shards of the largest positions fit.
const MAX_LEN: usize = 8 * 1024;

/// One shard's place: the last stream id delivered (`ms-seq`), exclusive, and whether it was
/// the stream's end when the cursor was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    pub ms: u64,
    pub seq: u64,
    pub drained: bool,
}

impl Position {
    /// Just before everything appended at or after `now_ms`: the position of "now".
    pub fn now(now_ms: u64) -> Self {
        Self { ms: now_ms.saturating_sub(1), seq: u64::MAX, drained: true }
    }

    /// The stream id, `ms-seq`, as Redis writes it.
    pub fn id(&self) -> String {
        format!("{}-{}", self.ms, self.seq)
    }

    /// `ms-seq` read back; `None` for anything else.
    pub fn parse_id(id: &str) -> Option<(u64, u64)> {
        let (ms, seq) = id.split_once('-')?;
        Some((ms.parse().ok()?, seq.parse().ok()?))
    }
}

/// Where a reader stands in its owner's outboxes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventCursor {
    /// When the positions were read (Redis ms; the earliest over the shards read).
    pub made_ms: u64,
    /// One per shard, by shard number.
    pub shards: Vec<Position>,
}

/// A cursor that is not one of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed cursor: {0}")]
pub struct CursorError(&'static str);

impl EventCursor {
    /// "Now" on `shards` shards: nothing to replay, every shard drained.
    pub fn now(shards: usize, now_ms: u64) -> Self {
        Self { made_ms: now_ms, shards: vec![Position::now(now_ms); shards] }
    }

    /// Shard `shard`'s position; a shard the cursor does not name (the shard count grew since)
    /// starts at the cursor's time.
    pub fn position(&self, shard: usize) -> Position {
        self.shards.get(shard).copied().unwrap_or_else(|| Position::now(self.made_ms))
    }

    /// The opaque text.
    pub fn encode(&self) -> String {
        let mut bytes = Vec::with_capacity(16 + self.shards.len() * 8);
        varint(&mut bytes, self.shards.len() as u64);
        varint(&mut bytes, self.made_ms);
        let mut bitmap = vec![0u8; self.shards.len().div_ceil(8)];
        for (i, p) in self.shards.iter().enumerate() {
            if p.drained {
                bitmap[i / 8] |= 1 << (i % 8);
            }
        }
        bytes.extend_from_slice(&bitmap);
        for p in &self.shards {
            // Wrapping: any pair of u64 round-trips, whatever the distance.
            varint(&mut bytes, zigzag(p.ms.wrapping_sub(self.made_ms) as i64));
            varint(&mut bytes, p.seq);
        }
        format!("{PREFIX}{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
    }

    /// Reads a cursor back; anything not made by [`EventCursor::encode`] is refused.
    pub fn decode(text: &str) -> Result<Self, CursorError> {
        if text.len() > MAX_LEN {
            return Err(CursorError("too long"));
        }
        let body = text.strip_prefix(PREFIX).ok_or(CursorError("unknown version"))?;
        let bytes =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(body).map_err(|_| CursorError("not base64url"))?;
        let mut reader = Reader { bytes: &bytes, at: 0 };
        let count = usize::try_from(reader.varint()?).map_err(|_| CursorError("shard count"))?;
        if count == 0 || count > MAX_SHARDS {
            return Err(CursorError("shard count"));
        }
        let made_ms = reader.varint()?;
        let bitmap = reader.take(count.div_ceil(8))?.to_vec();
        // Bits past the last shard must be clear: one cursor, one text.
        if count % 8 != 0 && bitmap[count / 8] >> (count % 8) != 0 {
            return Err(CursorError("bitmap"));
        }
        let mut shards = Vec::with_capacity(count);
        for i in 0..count {
            let ms = made_ms.wrapping_add(unzigzag(reader.varint()?) as u64);
            let seq = reader.varint()?;
            shards.push(Position { ms, seq, drained: bitmap[i / 8] & (1 << (i % 8)) != 0 });
        }
        if reader.at != bytes.len() {
            return Err(CursorError("trailing bytes"));
        }
        Ok(Self { made_ms, shards })
    }
}

fn zigzag(n: i64) -> u64 {
    ((n << 1) ^ (n >> 63)) as u64
}

fn unzigzag(n: u64) -> i64 {
    ((n >> 1) as i64) ^ -((n & 1) as i64)
}

fn varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], CursorError> {
        let end = self.at.checked_add(n).filter(|end| *end <= self.bytes.len()).ok_or(CursorError("truncated"))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    /// A LEB128 varint of at most ten bytes, in its shortest form (one text per value).
    fn varint(&mut self) -> Result<u64, CursorError> {
        let mut value: u64 = 0;
        for i in 0..10 {
            let byte = self.take(1)?[0];
            let bits = u64::from(byte & 0x7f);
            if i == 9 && bits > 1 {
                return Err(CursorError("varint overflow"));
            }
            value |= bits << (7 * i);
            if byte & 0x80 == 0 {
                if i > 0 && byte == 0 {
                    return Err(CursorError("varint not minimal"));
                }
                return Ok(value);
            }
        }
        Err(CursorError("varint overflow"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> EventCursor {
        EventCursor {
            made_ms: 1_764_900_000_000,
            shards: vec![
                Position { ms: 1_764_899_999_000, seq: 3, drained: true },
                Position { ms: 0, seq: 0, drained: false },
                Position::now(1_764_900_000_000),
                Position { ms: 1_764_900_000_500, seq: 0, drained: true },
            ],
        }
    }

    #[test]
    fn round_trips() {
        for cursor in [sample(), EventCursor::now(16, 42), EventCursor::now(256, u64::MAX), EventCursor::now(9, 0)] {
            let text = cursor.encode();
            assert!(text.starts_with("c1."), "{text}");
            assert!(text.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)), "{text}");
            assert_eq!(EventCursor::decode(&text).unwrap(), cursor);
        }
        assert!(EventCursor::now(16, 1_764_900_000_000).encode().len() < 300);
    }

    #[test]
    fn a_missing_shard_starts_at_the_cursors_time() {
        let cursor = EventCursor::now(2, 1000);
        assert_eq!(cursor.position(5), Position::now(1000));
        assert_eq!(Position::now(1000).id(), format!("999-{}", u64::MAX));
        assert_eq!(Position::parse_id("12-3"), Some((12, 3)));
        assert_eq!(Position::parse_id("12"), None);
    }

    #[test]
    fn anything_else_is_refused() {
        let good = sample().encode();
        let body = good.strip_prefix("c1.").unwrap();
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(body).unwrap();
        let b64 = |b: &[u8]| format!("c1.{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b));
        let mut trailing = bytes.clone();
        trailing.push(0);
        let truncated = &bytes[..bytes.len() - 1];
        let mut stray_bit = bytes.clone();
        // Shard count 4 at byte 0, the time's varint next, then the bitmap: set bit 7.
        let bitmap_at = 1 + bytes[1..].iter().position(|b| b & 0x80 == 0).unwrap() + 1;
        stray_bit[bitmap_at] |= 0x80;
        for bad in [
            String::new(),
            "c1.".to_owned(),
            "c2.".to_owned() + body,
            body.to_owned(),
            format!("c1.{body}="),
            format!("c1.{body}*"),
            b64(&trailing),
            b64(truncated),
            b64(&stray_bit),
            b64(&[0, 0]),
            b64(&[0x81, 0x02]),
            b64(&[0x80, 0x00]),
            b64(&[1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]),
            "c1.".to_owned() + &"A".repeat(MAX_LEN),
        ] {
            assert!(EventCursor::decode(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn zigzag_round_trips() {
        for n in [0i64, 1, -1, i64::MAX, i64::MIN, 500, -500] {
            assert_eq!(unzigzag(zigzag(n)), n);
        }
    }
}
