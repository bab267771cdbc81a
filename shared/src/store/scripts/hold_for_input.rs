//! `hold_for_input.lua`: the lease holder shows its task as `input_required` while it keeps
//! the lease (a question asked on a live upstream session).

use crate::store::reply::{Reply, code};
use crate::store::{Hold, StoreError};

include!(concat!(env!("OUT_DIR"), "/scripts/hold_for_input.rs"));

/// `{2}`: a cancel is pending; nothing was written.
const CANCEL_PENDING: i64 = 2;

fn decode(reply: Reply) -> Result<Hold, StoreError> {
    match reply.code()? {
        code::OK => Ok(Hold::Held),
        CANCEL_PENDING => Ok(Hold::CancelPending),
        code::LEASE_LOST => Ok(Hold::LeaseLost),
        code::KEY_REUSED => Ok(Hold::KeyReused(reply.string(1)?)),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    #[test]
    fn held_pending_or_refused() {
        assert_eq!(decode(reply![1, 3]).unwrap(), Hold::Held);
        assert_eq!(decode(reply![2]).unwrap(), Hold::CancelPending);
        let reused = decode(reply![-5, "k"]);
        assert_eq!(reused.unwrap(), Hold::KeyReused("k".into()));
        assert!(decode(reply![-5]).is_err(), "a reused key names the key");
    }
}
