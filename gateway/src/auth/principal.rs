//! An authenticated caller.

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub tenant: String,
    pub subject: String,
}

impl Principal {
    /// The caller under `--auth none`.
    pub fn anonymous() -> Self {
        Self { tenant: "default".into(), subject: "anonymous".into() }
    }

    /// The owner recorded on the tasks this caller creates.
    pub fn owner(&self) -> taskgate_shared::task::Owner {
        taskgate_shared::task::Owner { tenant: self.tenant.clone(), principal: self.subject.clone() }
    }
}
