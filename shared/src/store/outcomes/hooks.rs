//! What the webhook subscription scripts give back (docs/events.md, 2.8 and 2.9).

/// What `upsert_hook` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upserted {
    /// Written.
    Written {
        /// A new subscription (not a refresh).
        created: bool,
        /// When it expires (ms), `None` for no expiry.
        expires_at_ms: Option<u64>,
        /// Its acknowledged position ('' = none yet).
        position: String,
        /// The state before this write, for `deliveryStatus` on a refresh.
        was_active: bool,
        last_ok_ms: Option<u64>,
        last_error: Option<String>,
        failed_since_ms: Option<u64>,
    },
    /// A cap refused it: which (`principal` or `tenant`) and its value.
    Exhausted { limit: String, max: u64 },
}

/// A subscription a deliverer has claimed: what delivery needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookClaim {
    pub fence: u64,
    /// The subscriber, `tenant/principal` escaped.
    pub principal: String,
    /// Its owner digest.
    pub owner: String,
    pub url: String,
    pub name: String,
    pub args: String,
    /// The sealed secret, and the replaced one while its grace lasts.
    pub secret: String,
    pub secret_old: String,
    pub old_until_ms: u64,
    pub position: String,
    /// 0: no expiry.
    pub expires_at_ms: u64,
    pub dead_run: u64,
}

/// A renewal's answer: the secrets as the record holds them now, or the lease is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookRenewal {
    Renewed { secret: String, secret_old: String, old_until_ms: u64 },
    Lost,
}

/// A subscription's sealed secrets as its record holds them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookSecrets {
    pub secret: String,
    /// The replaced secret, still signing until `old_until_ms`.
    pub secret_old: String,
    pub old_until_ms: u64,
}

/// A fenced write's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookAck {
    /// Written; `active` false when this write suspended the subscription.
    Written { active: bool },
    /// A stale fence, another holder, or no record: nothing written.
    Refused,
}

/// What a deliverer writes with [`crate::store::Store::ack_hook`].
#[derive(Debug, Clone, Default)]
pub struct HookWrite<'a> {
    /// The new acknowledged position.
    pub position: Option<&'a str>,
    /// An event was accepted since the last write.
    pub ok: bool,
    /// The last failure's category.
    pub error: Option<&'a str>,
    /// A dead letter (JSON), and whether it counts toward suspension.
    pub dead_letter: Option<(&'a str, bool)>,
    /// Give the lease up.
    pub release: bool,
    /// With `release`: no deliverer claims the subscription again for this long (0: free at
    /// once). A deliverer that cannot serve it (its secret does not open here) parks it rather
    /// than letting every replica claim and drop it every pass.
    pub park_ms: u64,
}
