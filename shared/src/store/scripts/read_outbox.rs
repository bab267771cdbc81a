//! `read_outbox.lua`: one owner's outbox on one shard, after a position.

use redis::Value;

use crate::store::StoreError;
use crate::store::outcomes::ShardRead;
use crate::store::reply::Reply;

include!(concat!(env!("OUT_DIR"), "/scripts/read_outbox.rs"));

/// `{now, gap, ended, start, entries}`.
fn decode(reply: Reply) -> Result<ShardRead, StoreError> {
    let bad = || StoreError::UnexpectedReply("read_outbox: an entry that is not `id, fields`".into());
    let mut entries = Vec::new();
    for entry in reply.array(4)? {
        let Value::Array(parts) = entry else { return Err(bad()) };
        let [id, Value::Array(fields)] = parts.as_slice() else { return Err(bad()) };
        let text = |v: &Value| match v {
            Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
            Value::SimpleString(s) => Some(s.clone()),
            _ => None,
        };
        let id = text(id).ok_or_else(bad)?;
        let fields: Vec<String> = fields.iter().map(text).collect::<Option<_>>().ok_or_else(bad)?;
        let pairs = fields.chunks_exact(2).map(|kv| (kv[0].clone(), kv[1].clone())).collect();
        entries.push((id, pairs));
    }
    Ok(ShardRead {
        now_ms: u64::try_from(reply.int(0)?).unwrap_or(0),
        gap: reply.int(1)? == 1,
        ended: reply.int(2)? == 1,
        start: reply.string(3)?,
        entries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    #[test]
    fn reads_entries_and_flags() {
        let entry = Value::Array(vec![
            Value::BulkString(b"5-0".to_vec()),
            Value::Array(vec![Value::BulkString(b"t".to_vec()), Value::BulkString(b"tsk_1".to_vec())]),
        ]);
        let read = decode(Reply::new(vec![
            Value::Int(9),
            Value::Int(1),
            Value::Int(0),
            Value::BulkString(b"4-0".to_vec()),
            Value::Array(vec![entry]),
        ]))
        .unwrap();
        assert_eq!((read.now_ms, read.gap, read.ended, read.start.as_str()), (9, true, false, "4-0"));
        assert_eq!(read.entries, vec![("5-0".to_owned(), vec![("t".to_owned(), "tsk_1".to_owned())])]);
        assert!(decode(reply![9, 0, 1, "4-0", "not an array"]).is_err());
    }
}
