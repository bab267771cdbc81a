//! The keys every replica must agree on: the one an idempotency key becomes a task id under
//! (two replicas with different ones would make two tasks of one keyed call), and the
//! console's CSRF key (a form from one replica must post to another).
//!
//! With `--shared-secret-file` both are derived from the configured master secret
//! (HKDF-SHA256, one label each), so every replica given the same file agrees whatever happens
//! to Redis. Without it, each is a random key kept in Redis: offered by the first replica that
//! needs it and adopted by every other (`store::secrets`). A key Redis loses (a fail-over
//! before replication, a flush, a restart without persistence) would then split the replicas,
//! the old ones keeping theirs and a new one making another, so every replica re-reads the
//! keys it holds every `--shared-secret-refresh-ms`, writes back its own copy of a missing one
//! (the replicas that knew the old key restore it, rather than a new one winning), and adopts
//! whatever is stored.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use hkdf::Hkdf;
use sha2::Sha256;
use taskgate_shared::store::{Replicas, SharedSecret, Store, StoreError};

use crate::config::{Config, MasterSecret};

/// The keys of one replica. Shared by every runtime of the process.
pub(crate) struct Secrets {
    source: Source,
}

enum Source {
    /// Derived from the configured master secret, once.
    Derived { idempotency: [u8; 32], console: [u8; 32] },
    /// Kept in Redis.
    Redis { idempotency: Held, console: Held, replicas: Option<Replicas> },
}

/// A key kept in Redis, as this replica holds it: `None` until first needed.
#[derive(Default)]
struct Held {
    value: RwLock<Option<[u8; 32]>>,
    /// Taken by the first readers while the key is fetched, so they offer one candidate.
    first: tokio::sync::Mutex<()>,
}

impl Held {
    fn get(&self) -> Option<[u8; 32]> {
        *self.value.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn set(&self, secret: [u8; 32]) {
        *self.value.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(secret);
    }
}

/// Each key's HKDF label: distinct, so neither key tells anything of the other.
fn label(which: SharedSecret) -> &'static [u8] {
    match which {
        SharedSecret::Idempotency => b"taskgate idempotency key v1",
        SharedSecret::Console => b"taskgate console csrf key v1",
    }
}

fn derive(master: &MasterSecret, which: SharedSecret) -> [u8; 32] {
    let mut key = [0u8; 32];
    // 32 bytes is far below HKDF-SHA256's limit (255 blocks of 32).
    Hkdf::<Sha256>::new(None, &master.0)
        .expand(label(which), &mut key)
        .unwrap_or_else(|_| unreachable!("32 bytes is a valid HKDF-SHA256 length"));
    key
}

impl Secrets {
    pub(crate) fn new(config: &Config) -> Arc<Self> {
        let source = match &config.shared_secrets.master {
            Some(master) => Source::Derived {
                idempotency: derive(master, SharedSecret::Idempotency),
                console: derive(master, SharedSecret::Console),
            },
            None => Source::Redis {
                idempotency: Held::default(),
                console: Held::default(),
                replicas: config.durability.map(|d| (d.replicas.get(), d.timeout)),
            },
        };
        Arc::new(Self { source })
    }

    /// Whether the keys are kept in Redis (no master secret configured).
    pub(crate) fn in_redis(&self) -> bool {
        matches!(self.source, Source::Redis { .. })
    }

    /// The `which` key: derived, or as this replica holds it, fetched from Redis the first time.
    pub(crate) async fn get(&self, store: &Store, which: SharedSecret) -> Result<[u8; 32], StoreError> {
        let (held, replicas) = match &self.source {
            Source::Derived { idempotency, console } => {
                return Ok(match which {
                    SharedSecret::Idempotency => *idempotency,
                    SharedSecret::Console => *console,
                });
            }
            Source::Redis { idempotency, console, replicas } => match which {
                SharedSecret::Idempotency => (idempotency, *replicas),
                SharedSecret::Console => (console, *replicas),
            },
        };
        if let Some(secret) = held.get() {
            return Ok(secret);
        }
        let _first = held.first.lock().await;
        if let Some(secret) = held.get() {
            return Ok(secret);
        }
        let adopted = store.offer_secret(which, &rand::random(), replicas).await?;
        warn_if_unreplicated(which, adopted.acknowledged, replicas);
        held.set(adopted.secret);
        Ok(adopted.secret)
    }

    /// One pass of the repair: each key this replica holds is offered to Redis again (written
    /// back if it is missing there), and whatever Redis holds is adopted.
    pub(crate) async fn refresh(&self, store: &Store) {
        let Source::Redis { idempotency, console, replicas } = &self.source else { return };
        for (which, held) in [(SharedSecret::Idempotency, idempotency), (SharedSecret::Console, console)] {
            // Never needed yet: nothing to restore, and the first use fetches it.
            let Some(mine) = held.get() else { continue };
            match store.offer_secret(which, &mine, *replicas).await {
                Ok(adopted) => {
                    if adopted.written {
                        tracing::warn!(
                            secret = which.name(),
                            "a shared secret was missing from Redis; restored this replica's copy"
                        );
                        warn_if_unreplicated(which, adopted.acknowledged, *replicas);
                    } else if adopted.secret != mine {
                        tracing::warn!(
                            secret = which.name(),
                            "the shared secret in Redis is not this replica's; adopting it"
                        );
                        held.set(adopted.secret);
                    }
                }
                Err(err) => {
                    tracing::warn!(secret = which.name(), error = %err, "could not re-read a shared secret; keeping this replica's")
                }
            }
        }
    }

    /// [`Secrets::refresh`] every `every`, for as long as the task runs.
    pub(crate) async fn refresh_forever(self: Arc<Self>, store: Store, every: Duration) {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            self.refresh(&store).await;
        }
    }
}

fn warn_if_unreplicated(which: SharedSecret, acknowledged: Option<u32>, replicas: Option<Replicas>) {
    if let (Some(acked), Some((wanted, _))) = (acknowledged, replicas)
        && acked < wanted
    {
        tracing::warn!(
            secret = which.name(),
            acknowledged = acked,
            wanted,
            "a shared secret written to Redis is not yet on the replicas asked for; a fail-over now would lose it until the next refresh"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_is_derived_apart_and_only_from_the_master_secret() {
        let master = MasterSecret(b"0123456789abcdef0123456789abcdef".to_vec());
        let other = MasterSecret(b"0123456789abcdef0123456789abcdeF".to_vec());
        let idempotency = derive(&master, SharedSecret::Idempotency);
        assert_eq!(idempotency, derive(&MasterSecret(master.0.clone()), SharedSecret::Idempotency));
        assert_ne!(idempotency, derive(&master, SharedSecret::Console));
        assert_ne!(idempotency, derive(&other, SharedSecret::Idempotency));
    }

    /// The derivation never changes: replicas of two versions with one master secret must
    /// agree (values computed apart, with Python's `hmac`, as RFC 5869 describes).
    #[test]
    fn derivation_is_hkdf_sha256_without_salt_and_stays_so() {
        let master = MasterSecret(b"0123456789abcdef0123456789abcdef".to_vec());
        let hex = |key: [u8; 32]| key.iter().map(|b| format!("{b:02x}")).collect::<String>();
        assert_eq!(
            hex(derive(&master, SharedSecret::Idempotency)),
            "a1adb6104fc724d1ef3135887879528f288b5126e296452102537c9cb175118a"
        );
        assert_eq!(
            hex(derive(&master, SharedSecret::Console)),
            "36f3dc4931a75e2b8a326dd9a9b2dfb43759e1fe5ed70b0c068226e4660e7081"
        );
    }
}
