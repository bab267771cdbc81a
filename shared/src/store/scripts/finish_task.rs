//! `finish_task.lua`: the lease holder writes the terminal outcome.

use crate::store::reply::Fenced;
use crate::store::{Conn, Lease, StoreError, TaskKeys};
use crate::task::TaskStatus;

pub(in crate::store) struct Keys<'a> {
    pub(in crate::store) record: &'a str,
    pub(in crate::store) leases: &'a str,
    pub(in crate::store) inputs: &'a str,
    pub(in crate::store) timeline: &'a str,
    /// Where a long outcome is set aside.
    pub(in crate::store) outcome: &'a str,
}

impl<'a> From<&'a TaskKeys> for Keys<'a> {
    fn from(task: &'a TaskKeys) -> Self {
        Self {
            record: &task.record,
            leases: &task.leases,
            inputs: &task.inputs,
            timeline: &task.timeline,
            outcome: &task.outcome,
        }
    }
}

pub(in crate::store) struct Args<'a> {
    /// The holder's lease: the task, the worker and its fencing token.
    pub(in crate::store) lease: Lease<'a>,
    pub(in crate::store) status: TaskStatus,
    /// `result`, `error`, or empty for a cancel.
    pub(in crate::store) field: &'a str,
    /// The outcome's JSON text (empty for a cancel).
    pub(in crate::store) payload: &'a str,
    /// Empty keeps the message.
    pub(in crate::store) message: &'a str,
    pub(in crate::store) events: &'a str,
}

pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<Fenced, StoreError> {
    let mut call = super::FINISH_TASK.keys([keys.record, keys.leases, keys.inputs, keys.timeline, keys.outcome]);
    call.arg(args.lease.task_id.as_str())
        .arg(args.lease.worker)
        .arg(args.lease.fence)
        .arg(args.status.as_str())
        .arg(args.field)
        .arg(args.payload)
        .arg(args.message)
        .arg(args.events);
    super::run(conn, &call, Fenced::try_from).await
}
