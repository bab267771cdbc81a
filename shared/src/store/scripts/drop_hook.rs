//! `drop_hook.lua`: ends a webhook subscription.

use crate::store::StoreError;
use crate::store::reply::{Reply, code};

include!(concat!(env!("OUT_DIR"), "/scripts/drop_hook.rs"));

/// `{1}` dropped | `{-1}` no such subscription.
fn decode(reply: Reply) -> Result<bool, StoreError> {
    match reply.code()? {
        code::OK => Ok(true),
        code::NOT_FOUND => Ok(false),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    #[test]
    fn dropped_or_not_found() {
        assert!(decode(reply![1]).unwrap());
        assert!(!decode(reply![-1]).unwrap());
        assert!(decode(reply![2]).is_err());
    }
}
