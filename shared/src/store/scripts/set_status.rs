//! `set_status.lua`: the lease holder updates its working task's status message.

use crate::store::reply::Fenced;
use crate::store::{Conn, StoreError};

include!(concat!(env!("OUT_DIR"), "/scripts/set_status.rs"));

pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<Fenced, StoreError> {
    send(conn, keys, args, Fenced::try_from).await
}
