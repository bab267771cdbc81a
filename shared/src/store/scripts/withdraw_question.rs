//! `withdraw_question.lua`: the holder of a held question takes it back.

use crate::store::reply::{Reply, code};
use crate::store::{StoreError};

include!(concat!(env!("OUT_DIR"), "/scripts/withdraw_question.rs"));

/// Taken back, answered meanwhile (the task is working again either way), or the lease was
/// lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::store) enum Withdrawn {
    TakenBack,
    AlreadyAnswered,
    LeaseLost,
}

fn decode(reply: Reply) -> Result<Withdrawn, StoreError> {
    match reply.code()? {
        code::OK => Ok(Withdrawn::TakenBack),
        code::NOTHING => Ok(Withdrawn::AlreadyAnswered),
        code::LEASE_LOST => Ok(Withdrawn::LeaseLost),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    #[test]
    fn taken_back_or_answered_meanwhile() {
        assert_eq!(decode(reply![1, 4]).unwrap(), Withdrawn::TakenBack);
        assert_eq!(decode(reply![0]).unwrap(), Withdrawn::AlreadyAnswered);
        assert_eq!(decode(reply![-2]).unwrap(), Withdrawn::LeaseLost);
    }
}
