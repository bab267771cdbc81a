//! The outbox (docs/events.md, 2.3): one stream per queue shard and owner, an entry per status
//! change of a task of a tenant with events on, appended by the transition's own script. Here:
//! finding the right outbox for a transition ([`Store::on_outbox`]), reading an owner's outboxes
//! from a cursor ([`Store::read_outbox`]), and the cursor itself ([`cursor`]).

pub mod cursor;
mod read;

use std::future::Future;

pub use cursor::{EventCursor, Position};
pub use read::{OutboxEntry, OutboxRead, ReadRequest};

use super::keys::is_owner_digest;
use super::{Store, StoreError, TaskKeys};
use crate::task::TaskId;

impl Store {
    /// Runs a transition script (`send(keys)`) with the task's keys, its outbox the owner's
    /// (`owner`, a digest) when the caller knows it, else the shard's placeholder; when the
    /// script answers that the record's outbox is another (the prelude's `other_outbox`: it
    /// wrote nothing), once more with that one. One round trip when the caller knows the owner
    /// (or the task has no outbox); two for the reaper's reclaim of a task with one.
    pub(in crate::store) async fn on_outbox<T, F, Fut>(
        &self,
        task: &TaskId,
        owner: Option<&str>,
        mut send: F,
    ) -> Result<T, StoreError>
    where
        F: FnMut(TaskKeys) -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let mut keys = self.keys().task(task);
        if let Some(owner) = owner.filter(|o| is_owner_digest(o)) {
            keys.outbox = self.keys().outbox(task.shard(), owner);
        }
        for _ in 0..2 {
            match send(keys.clone()).await {
                // Never build a key from a value that could carry another hash tag.
                Err(StoreError::OtherOutbox(other)) if is_owner_digest(&other) => {
                    keys.outbox = self.keys().outbox(task.shard(), &other);
                }
                Err(StoreError::OtherOutbox(other)) => {
                    return Err(StoreError::UnexpectedReply(format!("task recorded with outbox {other:?}")));
                }
                settled => return settled,
            }
        }
        Err(StoreError::UnexpectedReply("the task's outbox changed between two scripts".into()))
    }
}
