//! `admit.lua`: fleet-wide admission of a request that creates a task (GCRA): its request
//! rate, creation rate and active-task cap. A request alone is admitted from its replica's
//! slice (`lease_requests.lua`).

use crate::store::reply::{Reply, code};
use crate::store::{Admission, Conn, Limit, StoreError, TenantKeys};

include!(concat!(env!("OUT_DIR"), "/scripts/admit.rs"));

/// A GCRA rate as the script takes it.
#[derive(Clone, Copy)]
pub(in crate::store) struct Gcra {
    /// 0: unlimited.
    pub(in crate::store) interval_ms: f64,
    pub(in crate::store) burst: u32,
}

pub(in crate::store) struct Args<'a> {
    pub(in crate::store) requests: Gcra,
    /// The task the request creates: checked against the tenant's creation rate and
    /// active-task cap too, then counted as active.
    pub(in crate::store) task: TaskArgs<'a>,
}

pub(in crate::store) struct TaskArgs<'a> {
    pub(in crate::store) creations: Gcra,
    /// 0: no cap.
    pub(in crate::store) max_active: u64,
    pub(in crate::store) task_id: &'a str,
    pub(in crate::store) ttl_ms: u64,
}

pub(in crate::store) async fn call(conn: &mut Conn, keys: &TenantKeys, args: Args<'_>) -> Result<Admission, StoreError> {
    let mut call = super::ADMIT.keys(Keys::from(keys).list());
    let task = args.task;
    call.arg(args.requests.interval_ms)
        .arg(args.requests.burst)
        .arg(task.creations.interval_ms)
        .arg(task.creations.burst)
        .arg(task.max_active)
        .arg(task.task_id)
        .arg(task.ttl_ms);
    super::run(conn, &call, decode).await
}

/// `{1}` admitted, `{0, retry after ms, limit name}` refused; a name this side does not know
/// is a mismatch with the script, not a limit to guess.
fn decode(reply: Reply) -> Result<Admission, StoreError> {
    match reply.code()? {
        code::OK => Ok(Admission::Admitted),
        code::NOTHING => {
            let limit = match reply.string(2)?.as_str() {
                "requests" => Limit::Requests,
                "creations" => Limit::Creations,
                "active_tasks" => Limit::ActiveTasks,
                other => return Err(StoreError::UnexpectedReply(format!("an unknown limit: {other:?}"))),
            };
            Ok(Admission::Refused { limit, retry_after_ms: reply.int(1)?.max(1) as u64 })
        }
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    fn refusal(retry_after: i64, limit: &str) -> Reply {
        reply![0, retry_after, limit]
    }

    #[test]
    fn refusals_name_their_limit() {
        assert_eq!(decode(reply![1]).unwrap(), Admission::Admitted);
        let refused = decode(refusal(0, "creations")).unwrap();
        assert_eq!(refused, Admission::Refused { limit: Limit::Creations, retry_after_ms: 1 });
        let active = decode(refusal(1000, "active_tasks")).unwrap();
        assert_eq!(active, Admission::Refused { limit: Limit::ActiveTasks, retry_after_ms: 1000 });
        assert!(decode(refusal(1, "active")).is_err());
    }
}
