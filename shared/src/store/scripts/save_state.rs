//! `save_state.lua`: the lease holder saves what a later run needs to continue.

use crate::store::reply::Fenced;
use crate::store::{Conn, Lease, StoreError};

pub(in crate::store) struct Keys<'a> {
    pub(in crate::store) record: &'a str,
}

pub(in crate::store) struct Args<'a> {
    /// The holder's lease: the task, the worker and its fencing token.
    pub(in crate::store) lease: Lease<'a>,
    pub(in crate::store) state: &'a str,
}

pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<Fenced, StoreError> {
    let mut call = super::SAVE_STATE.keys([keys.record]);
    call.arg(args.lease.worker).arg(args.lease.fence).arg(args.state);
    super::run(conn, &call, Fenced::try_from).await
}
