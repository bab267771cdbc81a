//! `upsert_hook.lua`: creates or refreshes a webhook subscription within its caps.

use crate::store::StoreError;
use crate::store::outcomes::Upserted;
use crate::store::reply::{Reply, code};

include!(concat!(env!("OUT_DIR"), "/scripts/upsert_hook.rs"));

/// A cap refused the subscription.
const EXHAUSTED: i64 = -25;

fn optional_ms(text: String) -> Option<u64> {
    text.parse().ok().filter(|ms| *ms > 0)
}

/// `{1, created, exp, pos, was_active, last_ok, last_err, failed_since}` | `{-25, limit, max}`.
fn decode(reply: Reply) -> Result<Upserted, StoreError> {
    match reply.code()? {
        code::OK => Ok(Upserted::Written {
            created: reply.int(1)? == 1,
            expires_at_ms: u64::try_from(reply.int(2)?).ok().filter(|ms| *ms > 0),
            position: reply.string(3)?,
            was_active: reply.string(4)? == "1",
            last_ok_ms: optional_ms(reply.string(5)?),
            last_error: Some(reply.string(6)?).filter(|e| !e.is_empty()),
            failed_since_ms: optional_ms(reply.string(7)?),
        }),
        EXHAUSTED => Ok(Upserted::Exhausted { limit: reply.string(1)?, max: reply.int(2)?.max(0) as u64 }),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    #[test]
    fn written_or_exhausted() {
        let written = decode(reply![1, 1, 1_000, "c1.x", "1", "", "", ""]).unwrap();
        assert_eq!(
            written,
            Upserted::Written {
                created: true,
                expires_at_ms: Some(1_000),
                position: "c1.x".into(),
                was_active: true,
                last_ok_ms: None,
                last_error: None,
                failed_since_ms: None,
            }
        );
        let refresh = decode(reply![1, 0, 0, "", "0", "5", "http_5xx", "4"]).unwrap();
        assert!(matches!(refresh, Upserted::Written { created: false, expires_at_ms: None, was_active: false, .. }));
        assert_eq!(decode(reply![-25, "tenant", 1000]).unwrap(), Upserted::Exhausted { limit: "tenant".into(), max: 1000 });
        assert!(decode(reply![-1]).is_err());
    }
}
