//! `poll_task.lua`: `tasks/get` for a client: ownership, then the poll rate, then the task.

use crate::store::reply::{Reply, code};
use crate::store::{Conn, Polled, StoreError};
use crate::task::{Owner, TaskId};

include!(concat!(env!("OUT_DIR"), "/scripts/poll_task.rs"));

pub(in crate::store) struct Args<'a> {
    pub(in crate::store) id: &'a TaskId,
    pub(in crate::store) owner: &'a Owner,
    /// The share of `pollIntervalMs` a poll may come early (0: no poll limit).
    pub(in crate::store) tolerance: f64,
}

/// `{-9, retry after ms, pollIntervalMs}`: sooner than the interval allows.
const TOO_SOON: i64 = -9;

pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<Polled, StoreError> {
    let mut call = super::POLL_TASK.keys(keys.list());
    call.arg(&args.owner.tenant).arg(&args.owner.principal).arg(args.tolerance);
    super::run(conn, &call, |reply| decode(reply, args.id)).await
}

fn decode(reply: Reply, id: &TaskId) -> Result<Polled, StoreError> {
    match reply.code()? {
        code::NOT_FOUND => Ok(Polled::NotFound),
        TOO_SOON => Ok(Polled::TooSoon {
            retry_after_ms: reply.int(1)?.max(1) as u64,
            interval_ms: reply.int(2)?.max(0) as u64,
        }),
        code::OK => super::read_task::snapshot(&reply, id).map(|s| Polled::Found(Box::new(s))),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::reply::reply;

    #[test]
    fn too_soon_says_when() {
        let id = TaskId::generate(1);
        let reply = reply![-9, 0, 500];
        assert!(matches!(decode(reply, &id).unwrap(), Polled::TooSoon { retry_after_ms: 1, interval_ms: 500 }));
        assert!(matches!(decode(reply![-1], &id).unwrap(), Polled::NotFound));
    }
}
