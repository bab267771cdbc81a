//! `read_task.lua`: a task's record fields and its outstanding input requests, read together;
//! for a client's read, only when it owns the task.

use crate::store::reply::{Reply, as_string, code};
use crate::store::{Conn, StoreError};
use serde_json::Map;

use crate::task::{Owner, Snapshot, SnapshotError, TaskId, TaskStatus};

include!(concat!(env!("OUT_DIR"), "/scripts/read_task.rs"));

pub(in crate::store) struct Args<'a> {
    pub(in crate::store) id: &'a TaskId,
    /// The client whose read it is; `None`: the service's own.
    pub(in crate::store) owner: Option<&'a Owner>,
}

/// The snapshot, or `None` for an unknown task (or one the owner named does not own).
pub(in crate::store) async fn call(
    conn: &mut Conn,
    keys: Keys<'_>,
    args: Args<'_>,
) -> Result<Option<Snapshot>, StoreError> {
    let mut call = super::READ_TASK.keys(keys.list());
    call.arg(args.owner.map_or("", |o| o.tenant.as_str())).arg(args.owner.map_or("", |o| o.principal.as_str()));
    super::run(conn, &call, |reply| decode(reply, args.id)).await
}

fn decode(reply: Reply, id: &TaskId) -> Result<Option<Snapshot>, StoreError> {
    match reply.code()? {
        code::NOT_FOUND => Ok(None),
        code::OK => snapshot(&reply, id).map(Some),
        _ => Err(reply.unexpected_code()),
    }
}

/// `{1, fields (in SNAPSHOT_FIELDS order), inputs (flat k,v)}` as a snapshot (`poll_task`
/// answers the same).
pub(super) fn snapshot(reply: &Reply, id: &TaskId) -> Result<Snapshot, StoreError> {
    let fields: Vec<Option<String>> = reply.array(1)?.iter().map(as_string).collect();
    snapshot_from(id, &fields, reply.pairs(2)?).map_err(|e| StoreError::Corrupt(e.field))
}

/// The record fields a snapshot needs, in `HMGET` order: the `FIELDS` of `read_task.lua` and
/// `poll_task.lua`, which a test holds equal.
const SNAPSHOT_FIELDS: [&str; 11] =
    ["tenant", "principal", "status", "msg", "created", "updated", "ttl", "poll", "result", "error", "ver"];

/// A snapshot from the record fields (in `SNAPSHOT_FIELDS` order) and outstanding inputs.
fn snapshot_from(
    id: &TaskId,
    f: &[Option<String>],
    inputs: Vec<(String, String)>,
) -> Result<Snapshot, SnapshotError> {
    if f.len() != SNAPSHOT_FIELDS.len() {
        return Err(SnapshotError { field: "record" });
    }
    let text = |i: usize, field: &'static str| f[i].clone().ok_or(SnapshotError { field });
    let int = |i: usize, field: &'static str| -> Result<i64, SnapshotError> {
        f[i].as_deref().and_then(|s| s.parse().ok()).ok_or(SnapshotError { field })
    };
    let json = |i: usize, field: &'static str| -> Result<Option<serde_json::Value>, SnapshotError> {
        f[i].as_deref().map(|s| serde_json::from_str(s).map_err(|_| SnapshotError { field })).transpose()
    };
    let status = TaskStatus::parse(&text(2, "status")?).ok_or(SnapshotError { field: "status" })?;
    let mut input_requests = Map::new();
    if status == TaskStatus::InputRequired {
        for (key, request) in inputs {
            let request = serde_json::from_str(&request).map_err(|_| SnapshotError { field: "inputs" })?;
            input_requests.insert(key, request);
        }
    }
    Ok(Snapshot {
        task_id: id.as_str().to_owned(),
        owner: Owner { tenant: text(0, "tenant")?, principal: text(1, "principal")? },
        status,
        status_message: f[3].clone(),
        created_at_ms: int(4, "created")?,
        updated_at_ms: int(5, "updated")?,
        ttl_ms: int(6, "ttl")? as u64,
        poll_interval_ms: int(7, "poll")? as u64,
        input_requests,
        result: f[8]
            .clone()
            .map(crate::protocol::result::stored_result)
            .transpose()
            .map_err(|_| SnapshotError { field: "result" })?,
        error: json(9, "error")?,
        version: int(10, "ver")? as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    /// The `FIELDS` list a script reads the record with.
    fn script_fields(script: &str) -> Vec<&str> {
        let list = script.split("local FIELDS = {").nth(1).and_then(|t| t.split('}').next()).expect("a FIELDS list");
        list.split(',').map(|field| field.trim().trim_matches('\'')).collect()
    }

    #[test]
    fn both_reads_name_the_fields_a_snapshot_decodes() {
        for script in [include_str!("read_task.lua"), include_str!("poll_task.lua")] {
            assert_eq!(script_fields(script), SNAPSHOT_FIELDS);
            // The scripts put a set-aside outcome back by position (`f[9], f[10]`, Lua counts
            // from 1).
            assert!(script.contains("f[9], f[10] = from_aside(f[9]"), "the outcome's positions moved");
        }
        assert_eq!((SNAPSHOT_FIELDS[8], SNAPSHOT_FIELDS[9]), ("result", "error"));
    }

    #[test]
    fn not_found_or_a_snapshot_that_parses() {
        let id = TaskId::generate(1);
        assert!(decode(reply![-1], &id).unwrap().is_none());
        let short = reply![1, redis::Value::Array(vec![]), redis::Value::Array(vec![])];
        assert!(matches!(decode(short, &id), Err(StoreError::Corrupt("record"))), "too few fields is corrupt");
    }
}
