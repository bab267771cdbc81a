//! `pass_wakeup.lua`: a claim that kept finding another task at the front hands its wake-up
//! back to the end of the stream.

use crate::store::{Conn, StoreError};

pub(in crate::store) struct Keys<'a> {
    /// The stream the entry was delivered from.
    pub(in crate::store) stream: &'a str,
}

pub(in crate::store) struct Args<'a> {
    pub(in crate::store) entry_id: &'a str,
    pub(in crate::store) group: &'a str,
    /// The task the entry names.
    pub(in crate::store) task_id: &'a str,
}

/// Whether the entry was still pending (and is passed on).
pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<bool, StoreError> {
    let mut call = super::PASS_WAKEUP.keys([keys.stream]);
    call.arg(args.entry_id).arg(args.group).arg(args.task_id);
    let passed: u8 = call.invoke_async(conn).await?;
    Ok(passed == 1)
}
