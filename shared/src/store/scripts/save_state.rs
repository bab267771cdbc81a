//! `save_state.lua`: the lease holder saves what a later run needs to continue.

use crate::store::reply::Fenced;
use crate::store::{Conn, StoreError};

include!(concat!(env!("OUT_DIR"), "/scripts/save_state.rs"));

pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<Fenced, StoreError> {
    send(conn, keys, args, Fenced::try_from).await
}
