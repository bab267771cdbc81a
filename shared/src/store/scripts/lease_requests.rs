//! `lease_requests.lua`: slices of tenants' request rates, for a replica to admit in memory, one
//! per key, in one call.

use crate::store::reply::{Reply, code};
use crate::store::{Conn, Leased, StoreError};

include!(concat!(env!("OUT_DIR"), "/scripts/lease_requests.rs"));

/// One tenant's lease, as the script takes it (four arguments, after its key).
#[derive(Clone, Copy)]
pub(in crate::store) struct Ask {
    /// ms between two requests (more than 0).
    pub(in crate::store) interval: f64,
    pub(in crate::store) burst: u32,
    /// Cells asked for (0: only give back).
    pub(in crate::store) want: u64,
    /// Cells of an earlier lease given back.
    pub(in crate::store) unused: u64,
}

/// Each key's lease, in the order of the keys (`asks` goes with them, one each).
pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, asks: &[Ask]) -> Result<Vec<Leased>, StoreError> {
    let mut call = super::LEASE_REQUESTS.keys(keys.list());
    for ask in asks {
        call.arg(ask.interval).arg(ask.burst).arg(ask.want).arg(ask.unused);
    }
    let leases = super::run(conn, &call, decode).await?;
    if leases.len() != asks.len() {
        return Err(StoreError::UnexpectedReply(format!("{} leases for {} tenants", leases.len(), asks.len())));
    }
    Ok(leases)
}

/// `{1, lease…}`, each `{1, granted}` | `{0, retry after ms}`.
fn decode(reply: Reply) -> Result<Vec<Leased>, StoreError> {
    reply.batch()?.into_iter().map(one).collect()
}

fn one(reply: Reply) -> Result<Leased, StoreError> {
    match reply.code()? {
        code::OK => match reply.int(1)? {
            n if n >= 1 => Ok(Leased::Granted(n as u64)),
            n => Err(StoreError::UnexpectedReply(format!("a lease of {n} requests"))),
        },
        code::NOTHING => Ok(Leased::Refused { retry_after_ms: reply.int(1)?.max(1) as u64 }),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    #[test]
    fn grants_and_refusals_decode_in_order() {
        assert_eq!(one(reply![1, 25]).unwrap(), Leased::Granted(25));
        assert_eq!(one(reply![0, 40]).unwrap(), Leased::Refused { retry_after_ms: 40 });
        assert_eq!(one(reply![0, 0]).unwrap(), Leased::Refused { retry_after_ms: 1 });
        assert!(one(reply![1, 0]).is_err());
        assert!(one(reply![7]).is_err());
        let lease = |v: Reply| redis::Value::Array(v.into_values());
        let batch = Reply::new(vec![redis::Value::Int(1), lease(reply![1, 25]), lease(reply![0, 40])]);
        assert_eq!(decode(batch).unwrap(), vec![Leased::Granted(25), Leased::Refused { retry_after_ms: 40 }]);
        assert!(decode(Reply::new(vec![redis::Value::Int(1)])).unwrap().is_empty());
        assert!(decode(reply![0]).is_err());
    }
}
