//! The Redis layer: connections, key names, and one Lua script per task state transition.
//!
//! Round trips per operation (the hot paths):
//! - create: 1 script (`create_task`); with durability replicas, the script and `WAIT` in one
//!   pipeline on a pooled connection, after the pool's `PING` of it;
//! - get: 1 script (`poll_task`, or `read_task` with polls unlimited: the owner checked, then
//!   the record and its outstanding inputs);
//! - update, cancel: 1 script each;
//! - claim: 1 script per delivered task when it is the fairest queued, 2 when another task is
//!   at the front (the blocking `XREADGROUP` that delivers is the wait);
//! - renew, status, park, finish, release: 1 script each.

mod catalogue;
mod compact;
mod connection;
mod console;
mod credentials;
mod dedicated;
mod diagnosis;
mod endpoint;
mod error;
mod hooks;
mod keys;
mod leases;
mod limits;
mod outbox;
mod outcomes;
mod pools;
mod related;
mod reply;
mod scripts;
mod secrets;
mod sentinel;
mod tasks;
mod transitions;
mod wire;

pub use catalogue::Published;
pub use compact::stored_capabilities;
pub use connection::{PrimaryMoves, Store};
pub use console::{Cursor, Filter, Inspection, Page, REVEALS_KEPT, Row, TIMELINE_MAX};
pub use credentials::{ListedCredential, StoredCredentials};
pub use dedicated::{Exclusive, Held, MAX_BLOCK, ShardSubscriber, Subscriber};
pub use diagnosis::Diagnosis;
pub use endpoint::{Endpoint, SentinelLogin, TlsPem, redact};
pub use error::StoreError;
pub use hooks::{DeadLetter, ListedHook, NewHook};
pub use keys::{
    CatalogueKeys, DEFAULT_POOL, HOOK_BUCKETS, HookKeys, Keys, MAX_POOL_LEN, QueueKeys, ShardKeys, TaskKeys,
    TaskLayout, TenantKeys, WORKER_GROUP, is_owner_digest, is_pool_name, owner_digest,
};
pub use leases::{Backlog, Delivery, Ending, Finish, Lease, MAX_BATCH, MAX_REDIRECTS, entry_ms};
pub use limits::{Rate, SliceAsk, TaskAdmission};
pub use outbox::{EventCursor, OutboxEntry, OutboxRead, Position, ReadRequest, cursor};
pub use outcomes::{
    Admission, Answered, CancelOutcome, Claim, Created, HeldAnswer, Hold, HookAck, HookClaim, HookRenewal, HookSecrets,
    HookWrite, Leased, Limit, NewTask, OperatorFail, OutboxLimits, Parked, Polled, Reclaimed, Released, Renewal,
    Started, Upserted,
};
pub use related::RelatedTask;
pub use secrets::{Adopted, Replicas, SharedSecret};
pub use tasks::KeyedTask;
pub use wire::{Conn, ShardEvent, ShardSubscription};
