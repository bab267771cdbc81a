//! `claim_hook.lua`: a deliverer claims one free webhook subscription, with a larger fence.

use crate::store::StoreError;
use crate::store::outcomes::HookClaim;
use crate::store::reply::{Reply, code};

include!(concat!(env!("OUT_DIR"), "/scripts/claim_hook.rs"));

/// `{1, fence, principal, owner, url, name, args, secret, secret_old, old_until, pos, exp,
/// dead_run}` | `{0}`.
fn decode(reply: Reply) -> Result<Option<HookClaim>, StoreError> {
    let unsigned = |i: usize| reply.int(i).map(|n| n.max(0) as u64);
    match reply.code()? {
        code::OK => Ok(Some(HookClaim {
            fence: unsigned(1)?,
            principal: reply.string(2)?,
            owner: reply.string(3)?,
            url: reply.string(4)?,
            name: reply.string(5)?,
            args: reply.string(6)?,
            secret: reply.string(7)?,
            secret_old: reply.string(8)?,
            old_until_ms: unsigned(9)?,
            position: reply.string(10)?,
            expires_at_ms: unsigned(11)?,
            dead_run: unsigned(12)?,
        })),
        code::NOTHING => Ok(None),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    #[test]
    fn claimed_or_not() {
        let claim = decode(reply![1, 7, "t/p", "ab", "https://x", "n", "{}", "s", "", 0, "c1.", 99, 1]).unwrap().unwrap();
        assert_eq!((claim.fence, claim.url.as_str(), claim.expires_at_ms, claim.dead_run), (7, "https://x", 99, 1));
        assert_eq!(decode(reply![0]).unwrap(), None);
        assert!(decode(reply![1, 7]).is_err());
    }
}
