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
    let end = |one: Reply| match one.code()? {
        code::OK => Ok(Some(RunEnd { slot: one.counted_tenant(2)?, ran: one.spent(3)? })),
        code::LEASE_LOST => Ok(None),
        _ => Err(one.unexpected_code()),
    };
    reply.batch()?.into_iter().map(end).collect()
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
