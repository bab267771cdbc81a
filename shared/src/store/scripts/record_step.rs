//! `record_step.lua`: the lease holder records a durable step's result.

use crate::store::reply::Fenced;
use crate::store::{Conn, Lease, StoreError};

pub(in crate::store) struct Keys<'a> {
    pub(in crate::store) record: &'a str,
    pub(in crate::store) steps: &'a str,
}

pub(in crate::store) struct Args<'a> {
    /// The holder's lease: the task, the worker and its fencing token.
    pub(in crate::store) lease: Lease<'a>,
    pub(in crate::store) name: &'a str,
    /// JSON text.
    pub(in crate::store) result: &'a str,
}

pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<Fenced, StoreError> {
    let mut call = super::RECORD_STEP.keys([keys.record, keys.steps]);
    call.arg(args.lease.worker).arg(args.lease.fence).arg(args.name).arg(args.result);
    super::run(conn, &call, Fenced::try_from).await
}
