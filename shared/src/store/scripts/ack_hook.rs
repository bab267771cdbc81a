//! `ack_hook.lua`: a deliverer's fenced write to one subscription.

use crate::store::StoreError;
use crate::store::outcomes::HookAck;
use crate::store::reply::{Reply, code};

include!(concat!(env!("OUT_DIR"), "/scripts/ack_hook.rs"));

/// `{1, active}` | `{-2}`.
fn decode(reply: Reply) -> Result<HookAck, StoreError> {
    match reply.code()? {
        code::OK => Ok(HookAck::Written { active: reply.int(1)? == 1 }),
        code::LEASE_LOST => Ok(HookAck::Refused),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    #[test]
    fn written_or_refused() {
        assert_eq!(decode(reply![1, 1]).unwrap(), HookAck::Written { active: true });
        assert_eq!(decode(reply![1, 0]).unwrap(), HookAck::Written { active: false });
        assert_eq!(decode(reply![-2]).unwrap(), HookAck::Refused);
    }
}
