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

/// One tenant's slice asked of [`Store::lease_requests`].
#[derive(Debug, Clone, Copy)]
pub struct SliceAsk<'a> {
    pub tenant: &'a str,
    /// The tenant's request rate (limited).
    pub rate: Rate,
    /// Cells asked for; 0 only gives back.
    pub want: u64,
    /// Cells of the tenant's previous slice given back.
    pub unused: u64,
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
    /// Slices of tenants' request rates for this replica to admit in memory, one per ask, in
    /// the order asked: up to `want` requests each, after giving back `unused` requests of the
    /// tenant's previous slice (`want` 0 only gives back). One call for them all, except where
    /// a command keeps to one slot (each tenant's keys have their own): one call each, sent
    /// together. Unlimited rates are never leased (the caller admits without asking).
    pub async fn lease_requests(&self, asks: &[SliceAsk<'_>]) -> Result<Vec<Leased>, StoreError> {
        let one = |ask: &SliceAsk<'_>| lease_requests::Ask {
            interval: ask.rate.gcra().interval_ms,
            burst: ask.rate.burst,
            want: ask.want,
            unused: ask.unused,
        };
        let key = |ask: &SliceAsk<'_>| self.keys().tenant(ask.tenant).requests;
        if asks.is_empty() {
            return Ok(Vec::new());
        }
        if self.one_slot_per_command() && asks.len() > 1 {
            let calls = asks.iter().map(|ask| async move {
                let keys = [key(ask)];
                lease_requests::call(&mut self.conn(), lease_requests::Keys { requests: &keys }, &[one(ask)]).await
            });
            let leases = futures::future::try_join_all(calls).await?;
            return Ok(leases.into_iter().flatten().collect());
        }
        let keys: Vec<String> = asks.iter().map(key).collect();
        let asks: Vec<_> = asks.iter().map(one).collect();
        lease_requests::call(&mut self.conn(), lease_requests::Keys { requests: &keys }, &asks).await
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
