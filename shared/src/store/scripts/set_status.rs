//! `set_status.lua`: the lease holder updates its working task's status message.

use crate::store::reply::Fenced;
use crate::store::{Conn, StoreError};

pub(in crate::store) struct Keys<'a> {
    pub(in crate::store) record: &'a str,
}

pub(in crate::store) struct Args<'a> {
    pub(in crate::store) task_id: &'a str,
    pub(in crate::store) worker: &'a str,
    pub(in crate::store) fence: u64,
    pub(in crate::store) message: &'a str,
    pub(in crate::store) events: &'a str,
}

pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<Fenced, StoreError> {
    let mut call = super::SET_STATUS.keys([keys.record]);
    call.arg(args.task_id).arg(args.worker).arg(args.fence).arg(args.message).arg(args.events);
    super::run(conn, &call, Fenced::try_from).await
}
