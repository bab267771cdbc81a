//! `save_state.lua`: the lease holder saves what a later run needs to continue.

use crate::store::reply::Fenced;
use crate::store::{Conn, StoreError};

pub(in crate::store) struct Keys<'a> {
    pub(in crate::store) record: &'a str,
}

pub(in crate::store) struct Args<'a> {
    pub(in crate::store) worker: &'a str,
    pub(in crate::store) fence: u64,
    pub(in crate::store) state: &'a str,
}

pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<Fenced, StoreError> {
    let mut call = super::SAVE_STATE.keys([keys.record]);
    call.arg(args.worker).arg(args.fence).arg(args.state);
    super::run(conn, &call, Fenced::try_from).await
}
