//! Per-tenant upstream credentials for the tests: credentials keys written to files, and
//! records stored the way the gateway's admin API stores them (sealed with the shared crate).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use taskgate_shared::credentials::{Credential, Holder, KeyRing};
use taskgate_shared::store::Store;

/// A credentials key file `<dir>/<id>.key` holding `byte` 32 times (hex); returns the
/// `--credentials-key` value naming it.
pub fn key_file(dir: &Path, id: &str, byte: u8) -> String {
    let path: PathBuf = dir.join(format!("{id}-{byte}.key"));
    std::fs::write(&path, format!("{}\n", format!("{byte:02x}").repeat(32))).expect("the key file is written");
    format!("{id}=file:{}", path.display())
}

/// Stores `values` for `(tenant, principal, upstream)`, sealed under the first of `keys`
/// (`(id, byte)` as [`key_file`] writes them).
pub async fn store_credential(
    store: &Store,
    keys: &[(&str, u8)],
    tenant: &str,
    principal: Option<&str>,
    upstream: &str,
    values: &[(&str, &str)],
) {
    let ring = KeyRing::from_keys(keys.iter().map(|(id, byte)| ((*id).to_owned(), [*byte; 32])).collect())
        .expect("a key ring");
    let holder = Holder { tenant: tenant.into(), principal: principal.map(str::to_owned), upstream: upstream.into() };
    let values: BTreeMap<String, String> = values.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    let credential = Credential::new(values).expect("a valid credential");
    let sealed = ring.seal(&holder, &credential, 0, "test").expect("sealed");
    store.put_credential(&holder, &sealed.to_json()).await.expect("stored");
}
