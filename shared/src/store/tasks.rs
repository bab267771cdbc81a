//! The gateway's task operations: create, read, answer input, cancel.

use redis::Value;

use super::outcomes::{Answered, CancelOutcome, Created, NewTask};
use super::reply::Reply;
use super::scripts::{accept_input, cancel_task, create_task, read_task};
use super::transitions::emit;
use super::{QueueKeys, Store, StoreError, TaskKeys};
use crate::task::{Actor, Owner, Snapshot, TaskId, TaskStatus, Transition};

/// What a keyed create finds under its id before it is admitted: the task an earlier request
/// with the same key made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedTask {
    pub tool: String,
    /// The fingerprint it was created with (`None`: created without a key).
    pub fingerprint: Option<String>,
}

impl Store {
    /// Writes the record and enqueues it, in one script. A create re-sent after a lost reply
    /// is answered [`Created::Replayed`] (the script is idempotent for one owner, id and tool),
    /// and only a new task counts as a transition.
    pub async fn create_task(&self, task: NewTask<'_>) -> Result<Created, StoreError> {
        let creating = Creating::new(self, &task);
        let created = create_task::call(&mut self.conn(), creating.keys(), creating.args(&task)).await?;
        Ok(self.created(&task, created).await)
    }

    /// The task an owner's idempotency key names, when it exists and is theirs: its owner
    /// fields, tool and fingerprint in one `HMGET`. A task of another owner under the same id
    /// is `None` (the create then reports the clash).
    pub async fn keyed_task(&self, id: &TaskId, owner: &Owner) -> Result<Option<KeyedTask>, StoreError> {
        let keys = self.keys().task(id);
        let (tenant, principal, tool, fingerprint): (Option<String>, Option<String>, Option<String>, Option<String>) =
            redis::cmd("HMGET")
                .arg(&keys.record)
                .arg("tenant")
                .arg("principal")
                .arg("tool")
                .arg("idem")
                .query_async(&mut self.conn())
                .await?;
        let mine =
            tenant.as_deref() == Some(owner.tenant.as_str()) && principal.as_deref() == Some(owner.principal.as_str());
        Ok(tool.filter(|_| mine).map(|tool| KeyedTask { tool, fingerprint }))
    }

    /// [`Store::create_task`], then `WAIT replicas timeout` on the same connection, in the same
    /// pipeline: `WAIT` counts the replicas that acknowledged the writes of the connection it
    /// is sent on, so after a reconnect between the two it would count nothing and return at
    /// once. The connection is a pooled one of its own ([`Store::durable_connection`]), so
    /// the wait for replicas holds up no other request. `Ok((createdAt, acknowledged))`.
    pub async fn create_task_durable(
        &self,
        task: NewTask<'_>,
        replicas: u32,
        timeout: std::time::Duration,
    ) -> Result<(Created, u32), StoreError> {
        let creating = Creating::new(self, &task);
        let invocation = create_task::invocation(creating.keys(), creating.args(&task));
        let mut pipe = redis::pipe();
        pipe.invoke_script(&invocation)
            .cmd("WAIT")
            .arg(replicas)
            .arg(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
        let mut conn = self.durable_connection().await?;
        let reply: Result<(Vec<Value>, u32), _> = pipe.query_async(&mut *conn).await;
        let reply = match reply {
            // This node has not seen the script: nothing ran; load it and send the pair again.
            Err(err) if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                match invocation.load_async(&mut *conn).await {
                    Ok(_) => pipe.query_async(&mut *conn).await,
                    Err(err) => Err(err),
                }
            }
            other => other,
        };
        let (created, acked) = match reply {
            Ok(reply) => reply,
            Err(err) => {
                // It may be broken: the next create gets another.
                conn.discard();
                return Err(err.into());
            }
        };
        let created = create_task::decode(Reply::new(created))?;
        Ok((self.created(&task, created).await, acked))
    }

    /// What a parked run leaves for the next run of the same call: the state its tool saved
    /// (`None`: nothing saved) and the durable steps it recorded (step name, result JSON), in
    /// one round trip. Empty for an unknown task.
    pub async fn parked_run(&self, id: &TaskId) -> Result<(Option<String>, Vec<(String, String)>), StoreError> {
        let keys = self.keys().task(id);
        let mut pipe = redis::pipe();
        pipe.cmd("HGET").arg(&keys.record).arg("tstate").cmd("HGETALL").arg(&keys.steps);
        Ok(pipe.query_async(&mut self.conn()).await?)
    }

    /// Reads a task in one round trip, its record and outstanding inputs atomically, whoever
    /// owns it. `None` when it does not exist (or expired). For the service's own reads; a
    /// client's read is [`Store::get_owned_task`].
    pub async fn get_task(&self, id: &TaskId) -> Result<Option<Snapshot>, StoreError> {
        self.read_task(id, None).await
    }

    /// [`Store::get_task`] for a client: `None` also when `owner` does not own it. The owner is
    /// compared inside the script before the rest of the record is read, so a foreign task
    /// costs what an unknown one does and nothing of it leaves Redis.
    pub async fn get_owned_task(&self, id: &TaskId, owner: &Owner) -> Result<Option<Snapshot>, StoreError> {
        self.read_task(id, Some(owner)).await
    }

    /// Whether `owner` owns the task: its owner fields alone (one `HMGET`), for a refusal that
    /// must not tell another principal's task from an unknown one.
    pub async fn owns_task(&self, id: &TaskId, owner: &Owner) -> Result<bool, StoreError> {
        let keys = self.keys().task(id);
        let (tenant, principal): (Option<String>, Option<String>) =
            redis::cmd("HMGET").arg(&keys.record).arg("tenant").arg("principal").query_async(&mut self.conn()).await?;
        Ok(tenant.as_deref() == Some(owner.tenant.as_str()) && principal.as_deref() == Some(owner.principal.as_str()))
    }

    async fn read_task(&self, id: &TaskId, owner: Option<&Owner>) -> Result<Option<Snapshot>, StoreError> {
        let keys = self.keys().task(id);
        read_task::call(&mut self.conn(), (&keys).into(), read_task::Args { id, owner }).await
    }

    /// Stores answers to outstanding input keys (each answer is JSON text). Ownership is
    /// checked inside the script. A task that resumes is queued in its tenant's fair turn, at
    /// `weight` (the tenant's share, as for [`NewTask::weight`]).
    pub async fn answer_inputs(
        &self,
        id: &TaskId,
        owner: &Owner,
        answers: &[(String, String)],
        resume_message: Option<&str>,
        weight: f64,
    ) -> Result<Answered, StoreError> {
        let (events, signal_prefix) = (self.events_channel(id), self.keys().signal_prefix());
        let args = accept_input::Args {
            id,
            owner,
            events: &events,
            resume_message: resume_message.unwrap_or(""),
            signal_prefix: &signal_prefix,
            // The record knows the task's pool; `default` is the first guess (store/pools.rs).
            pool: super::DEFAULT_POOL,
            weight,
            answers,
        };
        let digest = super::owner_digest(owner);
        let answered = self
            .on_outbox(id, Some(&digest), |keys| async move { accept_input::call(self, &keys, args).await })
            .await?;
        if let Answered::Applied { resumed: true, waited, .. } = answered {
            emit(
                id,
                Transition::new(Some(TaskStatus::InputRequired), TaskStatus::Working, Actor::Client).after(waited),
            );
        }
        Ok(answered)
    }

    /// Publishes an ephemeral notification about a task (see `Keys::notify_channel`).
    pub async fn notify(&self, payload: &serde_json::Value) -> Result<(), StoreError> {
        redis::cmd("PUBLISH")
            .arg(self.keys().notify_channel())
            .arg(payload.to_string())
            .query_async::<()>(&mut self.conn())
            .await?;
        Ok(())
    }

    /// Cancels a task, or flags it and signals its worker. Ownership is checked inside.
    pub async fn cancel_task(&self, id: &TaskId, owner: &Owner, message: &str) -> Result<CancelOutcome, StoreError> {
        self.cancel(id, Some(owner), message, None).await
    }

    /// An operator's cancel, of any tenant's task: `by` and `why` go into its timeline.
    pub async fn cancel_task_as_operator(
        &self,
        id: &TaskId,
        message: &str,
        by: &str,
        why: &str,
    ) -> Result<CancelOutcome, StoreError> {
        self.cancel(id, None, message, Some((by, why))).await
    }

    async fn cancel(
        &self,
        id: &TaskId,
        owner: Option<&Owner>,
        message: &str,
        operator: Option<(&str, &str)>,
    ) -> Result<CancelOutcome, StoreError> {
        let (by, why) = operator.unwrap_or_default();
        let (events, signal_prefix) = (self.events_channel(id), self.keys().signal_prefix());
        let args = cancel_task::Args {
            task_id: id.as_str(),
            tenant: owner.map_or("", |o| o.tenant.as_str()),
            principal: owner.map_or("", |o| o.principal.as_str()),
            message,
            events: &events,
            signal_prefix: &signal_prefix,
            operator: (by, why),
        };
        // An operator does not know the owner: the script names its outbox when it has one.
        let digest = owner.map(super::owner_digest);
        let (outcome, slot) = self
            .on_outbox(id, digest.as_deref(), |keys| async move {
                cancel_task::call(&mut self.conn(), (&keys).into(), args).await
            })
            .await?;
        match outcome {
            CancelOutcome::Cancelled { from, waited } => {
                let by = if operator.is_some() { Actor::Operator } else { Actor::Client };
                let transition = Transition::new(Some(from), TaskStatus::Cancelled, by).after(waited);
                self.ended(id, transition, slot.as_deref()).await;
            }
            // Perhaps this same cancel, re-sent after its reply was lost: freeing again is
            // harmless, and skipping it could leave the slot held.
            CancelOutcome::AlreadyTerminal => self.free_slot(id, slot.as_deref()).await,
            // A running task's worker ends it, and its store call frees the slot.
            CancelOutcome::Signalled | CancelOutcome::NotFound => {}
        }
        Ok(outcome)
    }

    /// Ends a task this process created and nobody follows (an inline call given up, a create
    /// that failed or was not made durable), as [`Store::cancel_task`] does. `counted`: whether
    /// its create was admitted into the tenant's active-task count (`NewTask::counted`). The
    /// create script may not have run, so a task not found still gives back the slot its
    /// admission took; a running one is only flagged, and its worker ends it.
    pub async fn abandon_task(
        &self,
        id: &TaskId,
        owner: &Owner,
        message: &str,
        counted: bool,
    ) -> Result<CancelOutcome, StoreError> {
        let outcome = self.cancel(id, Some(owner), message, None).await?;
        if outcome == CancelOutcome::NotFound && counted {
            self.free_slot(id, Some(&owner.tenant)).await;
        }
        Ok(outcome)
    }
}

/// What a create's call borrows: its keys and events channel.
struct Creating {
    task: TaskKeys,
    /// The pool's queue is declared like every other key: the create stays one script in one
    /// slot (the shard's), one round trip.
    queue: QueueKeys,
    /// The shard's task index, and its tenant's.
    indexes: (String, String),
    events: String,
    /// The record's `obx` ('' when the tenant has events off).
    outbox: String,
}

impl Creating {
    fn new(store: &Store, task: &NewTask<'_>) -> Self {
        let shard = task.id.shard();
        let mut keys = store.keys().task(task.id);
        let outbox = match task.events {
            Some(limits) => {
                let digest = super::owner_digest(task.owner);
                keys.outbox = store.keys().outbox(shard, &digest);
                limits.record_field(&digest)
            }
            None => String::new(),
        };
        Self {
            outbox,
            task: keys,
            queue: store.keys().queue(shard, task.pool),
            indexes: (store.keys().task_index(shard, None), store.keys().task_index(shard, Some(&task.owner.tenant))),
            events: store.events_channel(task.id),
        }
    }

    fn keys(&self) -> create_task::Keys<'_> {
        create_task::Keys::new(&self.task, &self.queue, (&self.indexes.0, &self.indexes.1))
    }

    fn args<'a>(&'a self, task: &'a NewTask<'a>) -> create_task::Args<'a> {
        create_task::Args { task, events: &self.events, outbox: &self.outbox }
    }
}

impl Store {
    /// A new task is the client's transition into `working`; a replay is none. A replay that
    /// found its task ended gives back the slot this create's admission took: a retry that
    /// raced the first request past the look-up was admitted as a new task before the script
    /// found this one. (Idempotent, so a retry that was never admitted costs one `ZREM`.)
    async fn created(&self, task: &NewTask<'_>, (created, ended): (Created, bool)) -> Created {
        match created {
            Created::New { .. } => emit(task.id, Transition::new(None, TaskStatus::Working, Actor::Client)),
            Created::Replayed { .. } if ended && task.counted => {
                self.free_slot(task.id, Some(&task.owner.tenant)).await;
            }
            Created::Replayed { .. } => {}
        }
        created
    }
}
