//! `finish_task.lua`: the lease holder writes the terminal outcome.

use crate::store::reply::{Reply, RunEnd, code};
use crate::store::{StoreError};

include!(concat!(env!("OUT_DIR"), "/scripts/finish_task.rs"));

/// `{1, version, tenant, ms worked or -1}` | `{-2}`.
fn decode(reply: Reply) -> Result<Option<RunEnd>, StoreError> {
    match reply.code()? {
        code::OK => Ok(Some(RunEnd { slot: reply.counted_tenant(2)?, ran: reply.spent(3)? })),
        code::LEASE_LOST => Ok(None),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    #[test]
    fn written_with_the_slot_it_held() {
        let counted = reply![1, 3, "acme", 40];
        let ran = Some(std::time::Duration::from_millis(40));
        assert_eq!(decode(counted).unwrap(), Some(RunEnd { slot: Some("acme".to_owned()), ran }));
        let replayed = reply![1, 3, "", -1];
        assert_eq!(decode(replayed).unwrap(), Some(RunEnd { slot: None, ran: None }));
        assert_eq!(decode(reply![-2]).unwrap(), None);
    }
}
