//! `finish_batch.lua`: the lease holder writes several of its tasks' outcomes, of one shard or of
//! several, in one run, each fenced on its own.

use crate::store::reply::{Reply, RunEnd, code};
use crate::store::{Conn, StoreError};

include!(concat!(env!("OUT_DIR"), "/scripts/finish_batch.rs"));

/// Each task's end in the order sent: `Some` written (or found written by this lease before),
/// `None` refused (the lease was lost).
pub(in crate::store) async fn call(
    conn: &mut Conn,
    keys: Keys<'_>,
    args: Args<'_>,
) -> Result<Vec<Option<RunEnd>>, StoreError> {
    send(conn, keys, args, decode).await
}

fn decode(reply: Reply) -> Result<Vec<Option<RunEnd>>, StoreError> {
    if reply.code()? != code::OK {
        return Err(reply.unexpected_code());
    }
    let mut ends = Vec::new();
    for i in 1.. {
        let Ok(items) = reply.array(i) else { break };
        let one = Reply::new(items.to_vec());
        ends.push(match one.code()? {
            code::OK => Some(RunEnd { slot: one.counted_tenant(2)?, ran: one.spent(3)? }),
            code::LEASE_LOST => None,
            _ => return Err(one.unexpected_code()),
        });
    }
    Ok(ends)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    #[test]
    fn each_task_decodes_in_order() {
        let one = |v: Reply| redis::Value::Array(v.into_values());
        let batch = Reply::new(vec![redis::Value::Int(1), one(reply![1, 3, "acme", 40]), one(reply![-2])]);
        let ran = Some(std::time::Duration::from_millis(40));
        assert_eq!(decode(batch).unwrap(), vec![Some(RunEnd { slot: Some("acme".to_owned()), ran }), None]);
        assert!(decode(Reply::new(vec![redis::Value::Int(1)])).unwrap().is_empty());
    }
}
