//! Input mid-task: parking for input, holding a question open, and its answer.

use super::Lease;
use crate::store::outcomes::{HeldAnswer, Hold, Parked};
use crate::store::scripts::withdraw_question::{self, Withdrawn};
use crate::store::scripts::{held_answer, hold_for_input, request_input};
use crate::store::transitions::emit;
use crate::store::{Store, StoreError};
use crate::task::{Actor, TaskStatus, Transition};

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
        let events = self.events_channel(lease.task_id);
        let args = hold_for_input::Args { lease, message, events: &events, key, request };
        let hold = self
            .on_outbox(lease.task_id, lease.outbox, |keys| async move {
                hold_for_input::call(&mut self.conn(), (&keys).into(), args).await
            })
            .await?;
        if hold == Hold::Held {
            emit(lease.task_id, Transition::new(Some(TaskStatus::Working), TaskStatus::InputRequired, Actor::Worker));
        }
        Ok(hold)
    }

    /// Takes a held question back (its asker stopped waiting); the task is working again.
    /// `Ok(false)` when the lease was lost; answered meanwhile counts as taken back.
    pub async fn withdraw_question(&self, lease: Lease<'_>, message: &str) -> Result<bool, StoreError> {
        let events = self.events_channel(lease.task_id);
        let args = withdraw_question::Args { lease, message, events: &events };
        let withdrawn = self
            .on_outbox(lease.task_id, lease.outbox, |keys| async move {
                let question = withdraw_question::Keys {
                    record: &keys.record,
                    inputs: &keys.inputs,
                    timeline: &keys.timeline,
                    outbox: &keys.outbox,
                };
                withdraw_question::call(&mut self.conn(), question, args).await
            })
            .await?;
        Ok(match withdrawn {
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
        let answer_keys = held_answer::Keys { record: &keys.record, answers: &keys.answers };
        let args = held_answer::Args { lease, key };
        held_answer::call(&mut self.conn(), answer_keys, args).await
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
        let events = self.events_channel(lease.task_id);
        let args = request_input::Args {
            lease,
            message: message.unwrap_or(""),
            events: &events,
            cancelled_message,
            tool_state: tool_state.unwrap_or(""),
            requests,
        };
        let (parked, run) = self
            .on_outbox(lease.task_id, lease.outbox, |keys| async move {
                request_input::call(&mut self.conn(), (&keys).into(), args).await
            })
            .await?;
        let from = Some(TaskStatus::Working);
        match parked {
            Parked::Parked => {
                emit(lease.task_id, Transition::new(from, TaskStatus::InputRequired, Actor::Worker).after(run.ran));
            }
            Parked::CancelledInstead => {
                let transition = Transition::new(from, TaskStatus::Cancelled, Actor::Worker).after(run.ran);
                self.ended(lease.task_id, transition, run.slot.as_deref()).await;
            }
            Parked::LeaseLost | Parked::KeyReused(_) => {}
        }
        Ok(parked)
    }
}
