//! `claim_batch.lua`: fenced leases on the tasks at the front of a pool's fair ready set on a
//! shard, one per delivered entry, in one run.

use crate::store::reply::Reply;
use crate::store::{Claim, Conn, StoreError};
use crate::task::TaskId;

use super::claim_task;

include!(concat!(env!("OUT_DIR"), "/scripts/claim_batch.rs"));

/// Where a claim's entry id and task id sit in its array, after claim_task's granted reply.
const ENTRY: usize = 15;
const TASK: usize = 16;

pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<Vec<Claim>, StoreError> {
    send(conn, keys, args, decode).await
}

fn decode(reply: Reply) -> Result<Vec<Claim>, StoreError> {
    let mut claims = Vec::new();
    for one in reply.batch()? {
        // One claim that does not decode (a damaged record) costs only its own task, which
        // stays leased until the lease runs out and the reaper takes it back, as a failed
        // single claim would: the batch's other tasks run.
        match decode_one(one) {
            Ok(claim) => claims.push(claim),
            Err(err) => tracing::warn!(error = %err, "a claimed task does not decode; left to its lease"),
        }
    }
    Ok(claims)
}

fn decode_one(claim: Reply) -> Result<Claim, StoreError> {
    let _entry = claim.string(ENTRY)?;
    let id = claim.string(TASK)?;
    let task_id = TaskId::parse(&id).ok_or_else(|| StoreError::UnexpectedReply(format!("claimed id {id:?}")))?;
    match claim_task::decode(claim, &task_id)? {
        claim_task::ClaimStep::Done(Some(claim)) => Ok(*claim),
        _ => Err(StoreError::UnexpectedReply(format!("claim of {task_id} not granted"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    #[test]
    fn a_batch_decodes_each_claim_with_its_task() {
        let (a, b) = (TaskId::generate(3), TaskId::generate(3));
        let claim = |id: &TaskId, fence: i64| {
            redis::Value::Array(
                reply![
                    1, fence, "noop", "{}", "", 0, redis::Value::Array(vec![]), "{}", "", "0",
                    redis::Value::Array(vec![]), "", "acme", "alice", "", "1-0", id.as_str()
                ]
                .into_values(),
            )
        };
        let claims = decode(Reply::new(vec![redis::Value::Int(1), claim(&a, 7), claim(&b, 8)])).unwrap();
        let got: Vec<(TaskId, u64)> = claims.into_iter().map(|c| (c.task_id, c.fence)).collect();
        assert_eq!(got, vec![(a.clone(), 7), (b.clone(), 8)]);
        assert!(decode(Reply::new(vec![redis::Value::Int(1)])).unwrap().is_empty());
        // A damaged claim between two good ones costs only itself.
        let damaged = redis::Value::Array(reply![1, 9, redis::Value::Nil].into_values());
        let claims = decode(Reply::new(vec![redis::Value::Int(1), claim(&a, 7), damaged, claim(&b, 8)])).unwrap();
        let got: Vec<(TaskId, u64)> = claims.into_iter().map(|c| (c.task_id, c.fence)).collect();
        assert_eq!(got, vec![(a, 7), (b, 8)]);
        assert!(decode(Reply::new(vec![redis::Value::Int(0)])).is_err());
    }
}
