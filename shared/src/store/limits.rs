//! Fleet-wide limits, kept in Redis so that N gateway replicas admit what one would.

use redis::Value;

use super::reply::Reply;
use super::{Store, StoreError, scripts};
use crate::task::{Owner, Snapshot, TaskId};

/// A rate: `per_second` sustained, `burst` more at once. `per_second <= 0` is unlimited.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub per_second: f64,
    pub burst: u32,
}

impl Rate {
    fn interval_ms(self) -> f64 {
        if self.per_second > 0.0 { 1000.0 / self.per_second } else { 0.0 }
    }

    pub fn is_limited(self) -> bool {
        self.per_second > 0.0
    }
}

/// Which limit refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Requests,
    Creations,
    ActiveTasks,
    Poll,
    /// Open listen streams on one replica (per principal or in all).
    ListenStreams,
}

impl Limit {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Requests => "requests",
            Self::Creations => "creations",
            Self::ActiveTasks => "active_tasks",
            Self::Poll => "poll",
            Self::ListenStreams => "listen_streams",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Admitted,
    Refused { limit: Limit, retry_after_ms: u64 },
}

/// A task about to be created, for admission.
#[derive(Debug, Clone, Copy)]
pub struct TaskAdmission<'a> {
    pub task_id: &'a TaskId,
    pub ttl_ms: u64,
    pub creations: Rate,
    pub max_active: u64,
}

/// The outcome of a client's `tasks/get`.
#[derive(Debug, Clone)]
pub enum Polled {
    /// Unknown, expired or not the caller's.
    NotFound,
    TooSoon {
        retry_after_ms: u64,
        /// The task's `pollIntervalMs`.
        interval_ms: u64,
    },
    Found(Box<Snapshot>),
}

impl Store {
    /// One request of `tenant` against its request rate.
    pub async fn admit_request(&self, tenant: &str, requests: Rate) -> Result<Admission, StoreError> {
        if !requests.is_limited() {
            return Ok(Admission::Admitted);
        }
        let keys = self.keys().tenant(tenant);
        let reply: Vec<Value> = scripts::ADMIT_REQUEST
            .keys([&keys.requests])
            .arg(requests.interval_ms())
            .arg(requests.burst)
            .invoke_async(&mut self.conn())
            .await?;
        Admission::try_from(Reply::new(reply))
    }

    /// One request that creates a task: request rate, creation rate and the active-task cap,
    /// checked together; the task is then counted as active until it ends or expires.
    pub async fn admit_task(
        &self,
        tenant: &str,
        requests: Rate,
        task: TaskAdmission<'_>,
    ) -> Result<Admission, StoreError> {
        if !requests.is_limited() && !task.creations.is_limited() && task.max_active == 0 {
            return Ok(Admission::Admitted);
        }
        let keys = self.keys().tenant(tenant);
        let reply: Vec<Value> = scripts::ADMIT_TASK
            .keys([&keys.requests, &keys.creations, &keys.active])
            .arg(requests.interval_ms())
            .arg(requests.burst)
            .arg(task.creations.interval_ms())
            .arg(task.creations.burst)
            .arg(task.max_active)
            .arg(task.task_id.as_str())
            .arg(task.ttl_ms)
            .invoke_async(&mut self.conn())
            .await?;
        Admission::try_from(Reply::new(reply))
    }

    /// The task ended: it no longer counts against its tenant's active-task cap. Best effort:
    /// an id left behind drops out when the task's expiry passes.
    pub async fn release_active(&self, tenant: &str, task_id: &TaskId) -> Result<(), StoreError> {
        redis::cmd("ZREM")
            .arg(self.keys().tenant(tenant).active)
            .arg(task_id.as_str())
            .query_async::<()>(&mut self.conn())
            .await?;
        Ok(())
    }

    /// A client's read of its task, with ownership and the poll rate checked in the same
    /// script (one round trip).
    pub async fn poll_task(&self, id: &TaskId, owner: &Owner, tolerance: f64) -> Result<Polled, StoreError> {
        let keys = self.keys().task(id);
        let reply: Vec<Value> = scripts::POLL_TASK
            .keys([&keys.record, &keys.inputs, &keys.poll, &keys.outcome])
            .arg(&owner.tenant)
            .arg(&owner.principal)
            .arg(tolerance)
            .invoke_async(&mut self.conn())
            .await?;
        Reply::new(reply).polled(id)
    }
}
