//! `publish_tools.lua`: a worker's heartbeat into the tool catalogue.

use crate::store::reply::{Reply, code};
use crate::store::{CatalogueKeys, Conn, StoreError};

include!(concat!(env!("OUT_DIR"), "/scripts/publish_tools.rs"));

pub(in crate::store) struct Args<'a> {
    pub(in crate::store) ttl_ms: u64,
    /// The worker's configuration digest (empty: none).
    pub(in crate::store) digest: &'a str,
    pub(in crate::store) worker: &'a str,
    /// Its status JSON, for the operator console.
    pub(in crate::store) status: &'a str,
    pub(in crate::store) pool: &'a str,
    /// Name, spec JSON; an empty spec marks a name live without listing it.
    pub(in crate::store) entries: &'a [(&'a str, String)],
}

/// The live digests of the fleet.
pub(in crate::store) async fn call(
    conn: &mut Conn,
    keys: &CatalogueKeys,
    args: Args<'_>,
) -> Result<Vec<String>, StoreError> {
    let mut call = super::PUBLISH_TOOLS.keys(Keys::from(keys).list());
    call.arg(args.ttl_ms).arg(args.digest).arg(args.worker).arg(args.status).arg(args.pool);
    for (name, spec) in args.entries {
        call.arg(*name).arg(spec);
    }
    super::run(conn, &call, decode).await
}

/// `{1, {live digests}}`.
fn decode(reply: Reply) -> Result<Vec<String>, StoreError> {
    match reply.code()? {
        code::OK => reply.strings(1),
        _ => Err(reply.unexpected_code()),
    }
}
