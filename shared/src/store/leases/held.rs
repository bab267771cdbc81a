//! Input mid-task: parking for input, holding a question open, and its answer.

use redis::Value;

use super::Lease;
use crate::store::reply::{Reply, Withdrawn};
use crate::store::transitions::emit;
use crate::store::{Store, StoreError, scripts};
use crate::task::{Actor, TaskStatus, Transition};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parked {
    Parked,
    /// A cancel was requested meanwhile; the task ended cancelled.
    CancelledInstead,
    LeaseLost,
    /// The tool asked for a key that was issued before (keys are lifetime-unique).
    KeyReused(String),
}

/// What [`Store::hold_for_input`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hold {
    /// The task shows `input_required`; this worker keeps the lease.
    Held,
    /// A cancel is pending: nothing was written.
    CancelPending,
    LeaseLost,
    KeyReused(String),
}

/// What [`Store::held_answer`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeldAnswer {
    /// The answer (JSON text); the task is working again.
    Answered(String),
    Waiting,
    /// The task ended meanwhile (cancelled, or expired).
    Ended,
    LeaseLost,
}

impl Store {
    /// Shows the task as `input_required` with one request (key, request JSON) while this
    /// worker keeps the lease: for a question asked on a live upstream session, which cannot be
    /// replayed. The answer comes back through [`held_answer`](Self::held_answer).
    pub async fn hold_for_input(
        &self,
        lease: Lease<'_>,
        message: &str,
        key: &str,
        request: &str,
    ) -> Result<Hold, StoreError> {
        let keys = self.keys().task(lease.task_id);
        let reply: Vec<Value> = scripts::HOLD_FOR_INPUT
            .keys([&keys.record, &keys.inputs, &keys.issued, &keys.timeline])
            .arg(lease.task_id.as_str())
            .arg(lease.worker)
            .arg(lease.fence)
            .arg(message)
            .arg(self.events_channel(lease.task_id))
            .arg(key)
            .arg(request)
            .invoke_async(&mut self.conn())
            .await?;
        let hold = Hold::try_from(Reply::new(reply))?;
        if hold == Hold::Held {
            emit(lease.task_id, Transition::new(Some(TaskStatus::Working), TaskStatus::InputRequired, Actor::Worker));
        }
        Ok(hold)
    }

    /// Takes a held question back (its asker stopped waiting); the task is working again.
    /// `Ok(false)` when the lease was lost; answered meanwhile counts as taken back.
    pub async fn withdraw_question(&self, lease: Lease<'_>, message: &str) -> Result<bool, StoreError> {
        let keys = self.keys().task(lease.task_id);
        let reply: Vec<Value> = scripts::WITHDRAW_QUESTION
            .keys([&keys.record, &keys.inputs, &keys.timeline])
            .arg(lease.task_id.as_str())
            .arg(lease.worker)
            .arg(lease.fence)
            .arg(message)
            .arg(self.events_channel(lease.task_id))
            .invoke_async(&mut self.conn())
            .await?;
        Ok(match Withdrawn::try_from(Reply::new(reply))? {
            Withdrawn::TakenBack => {
                emit(
                    lease.task_id,
                    Transition::new(Some(TaskStatus::InputRequired), TaskStatus::Working, Actor::Worker),
                );
                true
            }
            // The answer resumed it, and that transition was counted then.
            Withdrawn::AlreadyAnswered => true,
            Withdrawn::LeaseLost => false,
        })
    }

    /// The answer to a held request, if it came.
    pub async fn held_answer(&self, lease: Lease<'_>, key: &str) -> Result<HeldAnswer, StoreError> {
        let keys = self.keys().task(lease.task_id);
        let reply: Vec<Value> = scripts::HELD_ANSWER
            .keys([&keys.record, &keys.answers])
            .arg(lease.worker)
            .arg(lease.fence)
            .arg(key)
            .invoke_async(&mut self.conn())
            .await?;
        HeldAnswer::try_from(Reply::new(reply))
    }

    /// Parks the task in `input_required` with these requests (key, request JSON) and
    /// releases the lease.
    pub async fn request_input(
        &self,
        lease: Lease<'_>,
        message: Option<&str>,
        requests: &[(String, String)],
        tool_state: Option<&str>,
        cancelled_message: &str,
    ) -> Result<Parked, StoreError> {
        let keys = self.keys().task(lease.task_id);
        let mut call =
            scripts::REQUEST_INPUT.keys([&keys.record, &keys.leases, &keys.inputs, &keys.issued, &keys.timeline]);
        call.arg(lease.task_id.as_str())
            .arg(lease.worker)
            .arg(lease.fence)
            .arg(message.unwrap_or(""))
            .arg(self.events_channel(lease.task_id))
            .arg(cancelled_message)
            .arg(tool_state.unwrap_or(""));
        for (key, request) in requests {
            call.arg(key).arg(request);
        }
        let parked = Parked::try_from(Reply::new(call.invoke_async(&mut self.conn()).await?))?;
        let to = match parked {
            Parked::Parked => Some(TaskStatus::InputRequired),
            Parked::CancelledInstead => Some(TaskStatus::Cancelled),
            Parked::LeaseLost | Parked::KeyReused(_) => None,
        };
        if let Some(to) = to {
            emit(lease.task_id, Transition::new(Some(TaskStatus::Working), to, Actor::Worker));
        }
        Ok(parked)
    }
}
