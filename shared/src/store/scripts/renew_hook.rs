//! `renew_hook.lua`: a deliverer extends its lease on one subscription.

use crate::store::StoreError;
use crate::store::outcomes::HookRenewal;
use crate::store::reply::{Reply, code};

include!(concat!(env!("OUT_DIR"), "/scripts/renew_hook.rs"));

/// `{1, secret, secret_old, old_until}` | `{-2}`.
fn decode(reply: Reply) -> Result<HookRenewal, StoreError> {
    match reply.code()? {
        code::OK => Ok(HookRenewal::Renewed {
            secret: reply.string(1)?,
            secret_old: reply.string(2)?,
            old_until_ms: reply.int(3)?.max(0) as u64,
        }),
        code::LEASE_LOST => Ok(HookRenewal::Lost),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    #[test]
    fn renewed_or_lost() {
        assert!(matches!(decode(reply![1, "s", "", 0]).unwrap(), HookRenewal::Renewed { .. }));
        assert_eq!(decode(reply![-2]).unwrap(), HookRenewal::Lost);
        assert!(decode(reply![0]).is_err());
    }
}
