//! An authenticated caller.

use std::sync::{Arc, LazyLock};

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub tenant: String,
    pub subject: String,
    /// The scopes its credential grants (a JWT's `scope`/`scp`, an API key's listed scopes).
    /// Shared, so the per-request clone of a cached principal allocates nothing for them.
    pub scopes: Arc<[String]>,
    /// When the bearer JWT this caller was authenticated with expires (unix seconds); `None`
    /// for any other kind of credential. The token itself is not kept here: it is read again
    /// from the request's own `Authorization` header, and only for a tool whose server
    /// exchanges it, so no other request pays for it.
    pub jwt_expires_at_s: Option<u64>,
}

/// No scopes.
static NONE: LazyLock<Arc<[String]>> = LazyLock::new(|| Arc::from(Vec::new()));

impl Principal {
    pub fn new(tenant: impl Into<String>, subject: impl Into<String>, scopes: Vec<String>) -> Self {
        let scopes = if scopes.is_empty() { NONE.clone() } else { Arc::from(scopes) };
        Self { tenant: tenant.into(), subject: subject.into(), scopes, jwt_expires_at_s: None }
    }

    /// This caller, authenticated by a JWT that expires at `exp` (unix seconds).
    pub fn with_jwt_expiry(self, exp: u64) -> Self {
        Self { jwt_expires_at_s: Some(exp), ..self }
    }

    /// The caller under `--auth none`.
    pub fn anonymous() -> Self {
        Self::new("default", "anonymous", Vec::new())
    }

    /// The owner recorded on the tasks this caller creates.
    pub fn owner(&self) -> taskgate_shared::task::Owner {
        taskgate_shared::task::Owner { tenant: self.tenant.clone(), principal: self.subject.clone() }
    }
}
