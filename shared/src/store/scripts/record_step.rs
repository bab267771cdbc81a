//! `record_step.lua`: the lease holder records a durable step's result.

use crate::store::reply::Fenced;
use crate::store::{Conn, StoreError};

include!(concat!(env!("OUT_DIR"), "/scripts/record_step.rs"));

pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<Fenced, StoreError> {
    send(conn, keys, args, Fenced::try_from).await
}
