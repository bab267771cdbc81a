//! Task ids: `tsk_` + two hex digits of queue shard + 128 random bits in hex.
//!
//! The shard is part of the id so that every key of a task can carry the shard's hash tag
//! (see `store::keys`), whatever the configured shard count later becomes.

use rand::Rng as _;

const PREFIX: &str = "tsk_";
const LEN: usize = PREFIX.len() + 2 + 32;

/// A syntactically valid task id. Validity says nothing about existence or ownership.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TaskId(String);

impl TaskId {
    /// A fresh id on a random shard below `shards` (1..=256).
    pub fn generate(shards: u16) -> Self {
        let mut rng = rand::rng();
        let shard = rng.random_range(0..shards.clamp(1, 256));
        let bits: u128 = rng.random();
        Self(format!("{PREFIX}{shard:02x}{bits:032x}"))
    }

    /// The id on `shard % shards` with these 128 bits: an id derived rather than drawn (an
    /// idempotency key's, a MAC of its owner and key), so every replica derives the same one.
    pub fn derived(shards: u16, shard: u16, bits: u128) -> Self {
        let shard = shard % shards.clamp(1, 256);
        Self(format!("{PREFIX}{shard:02x}{bits:032x}"))
    }

    /// Parses a client-supplied id. Anything malformed is simply not an id: callers answer it
    /// exactly like an unknown one.
    pub fn parse(s: &str) -> Option<Self> {
        let hex = s.strip_prefix(PREFIX)?;
        let ok = s.len() == LEN && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        ok.then(|| Self(s.to_owned()))
    }

    pub fn shard(&self) -> u8 {
        // Checked by construction: two lowercase hex digits follow the prefix.
        u8::from_str_radix(&self.0[PREFIX.len()..PREFIX.len() + 2], 16).unwrap_or(0)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_parse_and_keep_their_shard() {
        for _ in 0..100 {
            let id = TaskId::generate(16);
            assert!(id.shard() < 16);
            assert_eq!(TaskId::parse(id.as_str()), Some(id));
        }
    }

    #[test]
    fn malformed_ids_are_refused() {
        for bad in
            ["", "tsk_", "tsk_00", "TSK_0000000000000000000000000000000000", "tsk_0g000000000000000000000000000000000"]
        {
            assert_eq!(TaskId::parse(bad), None, "{bad}");
        }
        assert_eq!(TaskId::parse(&format!("tsk_0A{}", "0".repeat(32))), None);
    }
}
