//! ISO 8601 timestamps for the wire.

use time::OffsetDateTime;

/// Unix time in milliseconds by this host's clock (a hint: task timestamps come from Redis).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

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

/// Unix milliseconds of a wire timestamp as [`iso8601_ms`] writes it
/// (`2026-08-21T10:30:00.123Z`); `None` for anything else.
pub fn parse_iso8601_ms(s: &str) -> Option<u64> {
    let (date, time) = s.strip_suffix('Z')?.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|p| p.parse::<i64>().ok());
    let (hh, mm, ss) = (t.next()??, t.next()??, t.next()??);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let ms = frac.get(..3).and_then(|f| f.parse::<i64>().ok()).unwrap_or(0);
    u64::try_from(((days * 86_400 + hh * 3_600 + mm * 60 + ss) * 1_000) + ms).ok()
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
