//! `pass_wakeup.lua`: a claim that kept finding another task at the front hands its wake-up
//! back to the end of the stream.

use crate::store::{Conn, StoreError};

include!(concat!(env!("OUT_DIR"), "/scripts/pass_wakeup.rs"));

/// Whether the entry was still pending (and is passed on).
pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<bool, StoreError> {
    let call = invocation(&keys, &args);
    let passed: u8 = call.invoke_async(conn).await?;
    Ok(passed == 1)
}
