//! Fleet-wide limits, kept in Redis so that N gateway replicas admit what one would.

use super::outcomes::{Admission, Leased, Polled};
use super::scripts::admit::{self, Gcra};
use super::scripts::{lease_requests, poll_task};
use super::{Store, StoreError};
use crate::task::{Owner, TaskId};

/// A rate: `per_second` sustained, `burst` more at once. `per_second <= 0` is unlimited.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub per_second: f64,
    pub burst: u32,
}

impl Rate {
    /// As the admission script takes it: the interval between two (0: unlimited).
    fn gcra(self) -> Gcra {
        Gcra { interval_ms: if self.per_second > 0.0 { 1000.0 / self.per_second } else { 0.0 }, burst: self.burst }
    }

    pub fn is_limited(self) -> bool {
        self.per_second > 0.0
    }
}

/// A task about to be created, for admission.
#[derive(Debug, Clone, Copy)]
pub struct TaskAdmission<'a> {
    pub task_id: &'a TaskId,
    pub ttl_ms: u64,
    pub creations: Rate,
    pub max_active: u64,
}

impl Store {
    /// A slice of `tenant`'s request rate for this replica to admit in memory: up to `want`
    /// requests, after giving back `unused` requests of its previous slice. `want` 0 only gives
    /// back. Unlimited rates are never leased (the caller admits without asking).
    pub async fn lease_requests(
        &self,
        tenant: &str,
        requests: Rate,
        want: u64,
        unused: u64,
    ) -> Result<Leased, StoreError> {
        let keys = self.keys().tenant(tenant);
        let args = lease_requests::Args { interval: requests.gcra().interval_ms, burst: requests.burst, want, unused };
        lease_requests::call(&mut self.conn(), lease_requests::Keys::from(&keys), args).await
    }

    /// One request that creates a task: request rate, creation rate and the active-task cap,
    /// checked together; the task is then counted as active until it ends (the store method
    /// that ends it frees the slot: `transitions.rs`) or expires.
    pub async fn admit_task(
        &self,
        tenant: &str,
        requests: Rate,
        task: TaskAdmission<'_>,
    ) -> Result<Admission, StoreError> {
        if !requests.is_limited() && !task.creations.is_limited() && task.max_active == 0 {
            return Ok(Admission::Admitted);
        }
        let created = admit::TaskArgs {
            creations: task.creations.gcra(),
            max_active: task.max_active,
            task_id: task.task_id.as_str(),
            ttl_ms: task.ttl_ms,
        };
        let args = admit::Args { requests: requests.gcra(), task: created };
        admit::call(&mut self.conn(), &self.keys().tenant(tenant), args).await
    }

    /// A client's read of its task, with ownership and the poll rate checked in the same
    /// script (one round trip).
    pub async fn poll_task(&self, id: &TaskId, owner: &Owner, tolerance: f64) -> Result<Polled, StoreError> {
        let keys = self.keys().task(id);
        poll_task::call(&mut self.conn(), (&keys).into(), poll_task::Args { id, owner, tolerance }).await
    }
}
