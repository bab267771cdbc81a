//! What an operator's fail gives back, below both the store method and the script that builds
//! it from its reply.

use crate::task::TaskStatus;

/// The outcome of an operator's fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperatorFail {
    /// Failed from status `from`; `counted_tenant` is the tenant whose active-task slot it
    /// held, if any.
    Failed {
        from: TaskStatus,
        counted_tenant: Option<String>,
    },
    AlreadyTerminal,
    NotFound,
}
