//! Related tasks (`_meta["io.modelcontextprotocol/relatedTaskIds"]` on `tools/call`): which of
//! the ids a call names its caller owns, what a failed run of the same call recorded, and the
//! owned ids kept beside the new task for its worker.
//!
//! Reads only, plus one `SET` before the create: no transition script changes for them (the
//! claim returns the kept ids with the rest of the task).

use super::{Store, StoreError};
use crate::task::{Owner, TaskId};

/// A task the caller named as related and owns, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelatedTask {
    pub id: TaskId,
    pub tool: String,
    /// Its status as stored (`working`, `failed`, …).
    pub status: String,
}

impl Store {
    /// Of `ids`, the tasks `owner` owns, in the order given. The owner fields are compared as
    /// `tasks/get` compares them, right after the read; another principal's or tenant's task,
    /// an unknown one and an expired one (its keys are gone) are all dropped alike. The reads
    /// go out together on the shared connection, which writes them as one batch: one round
    /// trip for all (each its own command, so a Cluster routes each to its slot).
    pub async fn owned_tasks(&self, ids: &[TaskId], owner: &Owner) -> Result<Vec<RelatedTask>, StoreError> {
        let reads = ids.iter().map(|id| {
            let record = self.keys().task(id).record;
            let mut conn = self.conn();
            async move {
                redis::cmd("HMGET")
                    .arg(record)
                    .arg(&["tenant", "principal", "tool", "status"][..])
                    .query_async::<(Option<String>, Option<String>, Option<String>, Option<String>)>(&mut conn)
                    .await
            }
        });
        let read = futures::future::try_join_all(reads).await?;
        Ok(ids
            .iter()
            .zip(read)
            .filter_map(|(id, (tenant, principal, tool, status))| {
                let mine = tenant.as_deref() == Some(owner.tenant.as_str())
                    && principal.as_deref() == Some(owner.principal.as_str());
                mine.then_some(RelatedTask { id: id.clone(), tool: tool?, status: status? })
            })
            .collect())
    }

    /// The arguments each task was created with (JSON text, put back when set aside), in the
    /// order given; `None` for one gone meanwhile. Only for tasks [`Store::owned_tasks`] found
    /// the caller's: nothing of another's task is read. One round trip.
    pub async fn task_arguments(&self, ids: &[&TaskId]) -> Result<Vec<Option<String>>, StoreError> {
        let reads = ids.iter().map(|id| {
            let keys = self.keys().task(id);
            let mut conn = self.conn();
            async move {
                // One slot per task: a pipeline of the field and the key it may be set aside in.
                let mut pipe = redis::pipe();
                pipe.cmd("HGET").arg(&keys.record).arg("args").cmd("GET").arg(&keys.args);
                pipe.query_async::<(Option<String>, Option<String>)>(&mut conn).await
            }
        });
        let read = futures::future::try_join_all(reads).await?;
        Ok(read
            .into_iter()
            .map(|(inline, aside)| match inline {
                Some(marker) if marker == super::compact::ASIDE => aside,
                other => other,
            })
            .collect())
    }

    /// The durable steps a task recorded (step name, result JSON), in one `HGETALL`. For an
    /// ended task of the caller's own: terminal, so no run records another.
    pub async fn recorded_steps(&self, id: &TaskId) -> Result<Vec<(String, String)>, StoreError> {
        let steps = self.keys().task(id).steps;
        Ok(redis::cmd("HGETALL").arg(&steps).query_async(&mut self.conn()).await?)
    }

    /// Keeps the owned related ids (a JSON array) beside task `id` for `ttl_ms`, written before
    /// the task is created so that its claim finds them (as the subject token is); if the create
    /// fails they just expire. `NX`: a keyed create that turns out to be a repeat leaves the first
    /// request's ids alone.
    pub async fn put_related(&self, id: &TaskId, ids_json: &str, ttl_ms: u64) -> Result<(), StoreError> {
        let key = self.keys().task(id).rel;
        redis::cmd("SET")
            .arg(&key)
            .arg(ids_json)
            .arg("PX")
            .arg(ttl_ms.max(1))
            .arg("NX")
            .exec_async(&mut self.conn())
            .await?;
        Ok(())
    }
}
