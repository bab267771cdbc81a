//! ISO 8601 timestamps for the wire.

use time::OffsetDateTime;

/// `2026-08-21T10:30:00.123Z` from Unix milliseconds (Redis `TIME`, so every replica agrees).
pub fn iso8601_ms(unix_ms: i64) -> String {
    let t = OffsetDateTime::from_unix_timestamp_nanos(i128::from(unix_ms) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats_utc_with_milliseconds() {
        assert_eq!(super::iso8601_ms(1_755_772_200_123), "2025-08-21T10:30:00.123Z");
        assert_eq!(super::iso8601_ms(0), "1970-01-01T00:00:00.000Z");
    }
}
