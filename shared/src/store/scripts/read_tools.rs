//! `read_tools.lua`: the catalogue as gateways list it, only what some live worker serves.

use crate::store::reply::{Reply, code};
use crate::store::{CatalogueKeys, Conn, StoreError};

include!(concat!(env!("OUT_DIR"), "/scripts/read_tools.rs"));

/// What the script read: name, spec JSON (a tool's, or an offering's under a name with a `/`),
/// and each name's route (name, pool).
pub(in crate::store) struct Live {
    pub(in crate::store) specs: Vec<(String, String)>,
    pub(in crate::store) routes: Vec<(String, String)>,
}

pub(in crate::store) async fn call(conn: &mut Conn, keys: &CatalogueKeys) -> Result<Live, StoreError> {
    let call = super::READ_TOOLS.keys(Keys::from(keys).list());
    super::run(conn, &call, decode).await
}

/// `{1, {name, spec JSON, ...}, {name, pool, ...}}`.
fn decode(reply: Reply) -> Result<Live, StoreError> {
    match reply.code()? {
        code::OK => Ok(Live { specs: reply.pairs(1)?, routes: reply.pairs(2)? }),
        _ => Err(reply.unexpected_code()),
    }
}
