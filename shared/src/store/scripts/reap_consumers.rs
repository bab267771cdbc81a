//! `reap_consumers.lua`: deletes the consumers of a shard stream's group that have nothing
//! pending.

use crate::store::{Conn, StoreError};

pub(in crate::store) struct Keys<'a> {
    pub(in crate::store) stream: &'a str,
}

pub(in crate::store) struct Args<'a> {
    pub(in crate::store) group: &'a str,
    /// How long another consumer must have been idle.
    pub(in crate::store) min_idle_ms: u64,
    /// This worker's own consumer (empty: none), deleted whatever its idle time.
    pub(in crate::store) own: &'a str,
}

/// How many consumers went.
pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<u64, StoreError> {
    let mut call = super::REAP_CONSUMERS.keys([keys.stream]);
    call.arg(args.group).arg(args.min_idle_ms).arg(args.own);
    Ok(call.invoke_async(conn).await?)
}
