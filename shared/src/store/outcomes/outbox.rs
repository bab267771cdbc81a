//! The outbox's values (docs/events.md, 2.3): what a create writes into a record, and what one
//! `read_outbox` script gives back, below both the script modules and the store's methods.

/// One shard's read: Redis's time, whether a gap was found, whether the stream's end was
/// reached, the position reading started after (the floor, when `maxAgeMs` moved it), and the
/// entries (stream id, fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::store) struct ShardRead {
    pub(in crate::store) now_ms: u64,
    pub(in crate::store) gap: bool,
    pub(in crate::store) ended: bool,
    pub(in crate::store) start: String,
    pub(in crate::store) entries: Vec<(String, Vec<(String, String)>)>,
}

/// How long and how far an owner's outbox is kept, written into each record of a tenant with
/// events on (its `obx`), so every later transition trims by the settings the task was
/// created under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboxLimits {
    /// Entries older than this go at the next append (`MINID ~`); the stream itself expires
    /// after twice this without an append.
    pub retention_ms: u64,
    /// At most about this many entries per stream (`MAXLEN ~`).
    pub cap: u64,
}

impl OutboxLimits {
    /// What `create_task` writes into the record's `obx`: `"<owner digest> <retention> <cap>"`
    /// (the prelude's `outbox_of` reads it apart).
    pub(in crate::store) fn record_field(&self, digest: &str) -> String {
        format!("{digest} {} {}", self.retention_ms, self.cap)
    }
}
