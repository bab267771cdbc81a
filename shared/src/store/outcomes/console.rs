//! What an operator's fail gives back, below both the store method and the script that builds
//! it from its reply.

use crate::task::TaskStatus;

/// The outcome of an operator's fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperatorFail {
    /// Failed from status `from` (the store has freed the active-task slot it held).
    Failed {
        from: TaskStatus,
    },
    AlreadyTerminal,
    NotFound,
}
