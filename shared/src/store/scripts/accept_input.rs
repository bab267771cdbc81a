//! `accept_input.lua`: a client's answers (`tasks/update`); the task resumes once nothing is
//! outstanding. Sent through [`Store::on_pool_queue`](crate::store::Store::on_pool_queue),
//! which finds the task's pool: the gateway does not know it without reading the record, so it
//! tries `default` first; a task of another pool costs a second round trip (store/pools.rs).

use crate::store::reply::{Reply, code};
use crate::store::{Answered, StoreError};

include!(concat!(env!("OUT_DIR"), "/scripts/accept_input.rs"));

/// `{1, version, resumed 0|1, ms waited or -1}` applied | `{0}` nothing applied | `{-1}`.
fn decode(reply: Reply) -> Result<Answered, StoreError> {
    match reply.code()? {
        code::OK => Ok(Answered::Applied {
            version: u64::try_from(reply.int(1)?).map_err(|_| reply.unexpected_code())?,
            resumed: reply.int(2)? == 1,
            waited: reply.spent(3)?,
        }),
        code::NOTHING => Ok(Answered::Ignored),
        code::NOT_FOUND => Ok(Answered::NotFound),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    #[test]
    fn applied_ignored_or_not_found() {
        let applied = decode(reply![1, 3, 1, -1]).unwrap();
        assert_eq!(applied, Answered::Applied { version: 3, resumed: true, waited: None });
        assert_eq!(decode(reply![0]).unwrap(), Answered::Ignored);
        assert_eq!(decode(reply![-1]).unwrap(), Answered::NotFound);
    }
}
