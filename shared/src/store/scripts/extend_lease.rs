//! `extend_lease.lua`: the lease holder renews its lease.

use crate::store::reply::{Reply, code};
use crate::store::{Conn, Lease, Renewal, StoreError, TaskKeys};

pub(in crate::store) struct Keys<'a> {
    pub(in crate::store) record: &'a str,
    pub(in crate::store) leases: &'a str,
}

impl<'a> From<&'a TaskKeys> for Keys<'a> {
    fn from(task: &'a TaskKeys) -> Self {
        Self { record: &task.record, leases: &task.leases }
    }
}

pub(in crate::store) struct Args<'a> {
    /// The holder's lease: the task, the worker and its fencing token.
    pub(in crate::store) lease: Lease<'a>,
    pub(in crate::store) lease_ms: u64,
}

pub(in crate::store) async fn call(conn: &mut Conn, keys: Keys<'_>, args: Args<'_>) -> Result<Renewal, StoreError> {
    let mut call = super::EXTEND_LEASE.keys([keys.record, keys.leases]);
    call.arg(args.lease.task_id.as_str()).arg(args.lease.worker).arg(args.lease.fence).arg(args.lease_ms);
    super::run(conn, &call, decode).await
}

fn decode(reply: Reply) -> Result<Renewal, StoreError> {
    match reply.code()? {
        code::OK => Ok(Renewal::Held { cancel_requested: reply.int(1)? == 1 }),
        code::LEASE_LOST => Ok(Renewal::Lost),
        _ => Err(reply.unexpected_code()),
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;

    #[test]
    fn held_or_lost() {
        let held = decode(Reply::new(vec![Value::Int(1), Value::Int(1)])).unwrap();
        assert_eq!(held, Renewal::Held { cancel_requested: true });
        assert_eq!(decode(Reply::new(vec![Value::Int(-2)])).unwrap(), Renewal::Lost);
        assert!(decode(Reply::new(vec![Value::Int(0)])).is_err());
    }
}
