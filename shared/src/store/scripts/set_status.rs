//! `set_status.lua`: the lease holder updates its working task's status message.

use crate::store::reply::Fenced;
use crate::store::{Conn, Lease, StoreError};

pub(in crate::store) struct Keys<'a> {
    pub(in crate::store) record: &'a str,
}

pub(in crate::store) struct Args<'a> {
    /// The holder's lease: the task, the worker and its fencing token.
    pub(in crate::store) lease: Lease<'a>,
    pub(in crate::store) message: &'a str,
    pub(in crate::store) events: &'a str,
}

pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<Fenced, StoreError> {
    let mut call = super::SET_STATUS.keys([keys.record]);
    call.arg(args.lease.task_id.as_str()).arg(args.lease.worker).arg(args.lease.fence).arg(args.message).arg(args.events);
    super::run(conn, &call, Fenced::try_from).await
}
