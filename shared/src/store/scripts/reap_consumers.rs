//! `reap_consumers.lua`: deletes the consumers of a shard stream's group that have nothing
//! pending.

use crate::store::{Conn, StoreError};

include!(concat!(env!("OUT_DIR"), "/scripts/reap_consumers.rs"));

/// How many consumers went.
pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<u64, StoreError> {
    let call = invocation(&keys, &args);
    Ok(call.invoke_async(conn).await?)
}
