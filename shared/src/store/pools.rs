//! Which queue a task is put back on: its own worker pool's, named in its record.
//!
//! A script may touch only the keys it is handed, and the pool is in the record it is about to
//! read, so the caller declares the queue of the pool it expects (its own, or `default`) and the
//! script checks it against the record before writing anything. When they differ the script
//! names the record's pool and the caller sends it again with that queue declared: one round
//! trip when the guess is right (a worker releasing its own task, a reaper reclaiming its own
//! pool's, an answer to a `default` pool task), two otherwise. A task is therefore never queued
//! where its pool's workers do not read.

use redis::{ScriptInvocation, Value};

use super::reply::Reply;
use super::{QueueKeys, Store, StoreError, is_pool_name};
use crate::task::TaskId;

impl Store {
    /// Runs an enqueueing script (`build(queue, pool)` makes the invocation) with `guess`'s queue
    /// on the task's shard declared, and once more with the record's pool's queue if the script
    /// names another pool; `decode` reads the reply that stands.
    pub(super) async fn on_pool_queue<T>(
        &self,
        task: &TaskId,
        guess: &str,
        build: impl Fn(&QueueKeys, &str) -> ScriptInvocation<'static>,
        decode: impl FnOnce(Reply) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut pool = guess.to_owned();
        for _ in 0..2 {
            let invocation = build(&self.keys().queue(task.shard(), &pool), &pool);
            let reply: Vec<Value> = invocation.invoke_async(&mut self.conn()).await?;
            let reply = Reply::new(reply);
            match reply.other_pool() {
                None => return decode(reply),
                // Never build a key from a value that could carry another hash tag.
                Some(other) if is_pool_name(&other) && other != pool => pool = other,
                Some(other) => return Err(StoreError::UnexpectedReply(format!("task recorded for pool {other:?}"))),
            }
        }
        Err(StoreError::UnexpectedReply("the task's pool changed between two scripts".into()))
    }
}
