//! `held_answer.lua`: the holder of a held question looks for its answer.

use crate::store::reply::{Reply, code};
use crate::store::{HeldAnswer, StoreError};

include!(concat!(env!("OUT_DIR"), "/scripts/held_answer.rs"));

fn decode(reply: Reply) -> Result<HeldAnswer, StoreError> {
    match reply.code()? {
        code::OK => Ok(HeldAnswer::Answered(reply.string(1)?)),
        code::NOTHING => Ok(HeldAnswer::Waiting),
        // The task ended meanwhile (cancelled, or expired).
        code::ALREADY_ENDED => Ok(HeldAnswer::Ended),
        code::LEASE_LOST => Ok(HeldAnswer::LeaseLost),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    #[test]
    fn answered_waiting_or_ended() {
        let answered = decode(reply![1, "{}"]);
        assert_eq!(answered.unwrap(), HeldAnswer::Answered("{}".into()));
        assert_eq!(decode(reply![0]).unwrap(), HeldAnswer::Waiting);
        assert_eq!(decode(reply![5]).unwrap(), HeldAnswer::Ended);
    }
}
