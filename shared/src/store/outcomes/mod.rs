//! The values the store's methods give back that their scripts build from a reply. They sit
//! below both, so a script module and the method that calls it do not import each other.

mod console;
mod hooks;
mod leases;
mod limits;
mod outbox;
mod tasks;

pub use console::OperatorFail;
pub use hooks::{HookAck, HookClaim, HookRenewal, HookSecrets, HookWrite, Upserted};
pub use leases::{Claim, HeldAnswer, Hold, Parked, Reclaimed, Released, Renewal, Started};
pub use limits::{Admission, Leased, Limit, Polled};
pub use outbox::OutboxLimits;
pub(in crate::store) use outbox::ShardRead;
pub use tasks::{Answered, CancelOutcome, Created, NewTask};
