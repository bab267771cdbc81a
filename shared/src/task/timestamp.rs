//! ISO 8601 timestamps for the wire.

use std::io::Write as _;

use time::OffsetDateTime;

/// Unix time in milliseconds by this host's clock (a hint: task timestamps come from Redis).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// `2026-08-21T10:30:00.123Z` from Unix milliseconds (Redis `TIME`, so every replica agrees).
pub fn iso8601_ms(unix_ms: i64) -> String {
    let mut out = Vec::with_capacity(24);
    write_iso8601_ms(&mut out, unix_ms);
    // Digits, dashes, colons and letters: ASCII.
    String::from_utf8(out).unwrap_or_default()
}

/// [`iso8601_ms`] written straight into `out`, without a string of its own.
pub fn write_iso8601_ms(out: &mut Vec<u8>, unix_ms: i64) {
    let t = OffsetDateTime::from_unix_timestamp_nanos(i128::from(unix_ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    // Into a Vec: writing cannot fail.
    let _ = write!(
        out,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    );
}

/// Unix milliseconds of an RFC 3339 timestamp, such as [`iso8601_ms`] writes
/// (`2026-08-21T10:30:00.123Z`); `None` for anything else or before 1970.
pub fn parse_iso8601_ms(s: &str) -> Option<u64> {
    let t = OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()?;
    u64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_what_it_formats() {
        for ms in [0, 1_755_772_200_123, 1_798_000_000_999] {
            assert_eq!(super::parse_iso8601_ms(&super::iso8601_ms(ms)), Some(ms as u64));
        }
        assert_eq!(super::parse_iso8601_ms("yesterday"), None);
    }

    #[test]
    fn formats_utc_with_milliseconds() {
        assert_eq!(super::iso8601_ms(1_755_772_200_123), "2025-08-21T10:30:00.123Z");
        assert_eq!(super::iso8601_ms(0), "1970-01-01T00:00:00.000Z");
    }
}
