//! The secrets every gateway of a namespace must agree on, when they are kept in Redis rather
//! than derived from configuration: the key idempotency keys become task ids under, and the
//! console's CSRF key. Each is one string key of 64 hex digits, without expiry.
//!
//! A gateway offers its own candidate and takes whatever is stored (`SET NX GET`, one atomic
//! command: the first writer wins, every other reader gets the winner). The same call restores
//! a lost key: a gateway that already holds a secret offers that one, so the replicas that knew
//! it put it back rather than a new one winning.

use std::time::Duration;

use super::{Store, StoreError};

/// Which shared secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SharedSecret {
    /// The key an idempotency key becomes a task id under.
    Idempotency,
    /// The console's CSRF key.
    Console,
}

impl SharedSecret {
    pub const ALL: [Self; 2] = [Self::Idempotency, Self::Console];

    /// Its name in logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Idempotency => "idempotency",
            Self::Console => "console",
        }
    }
}

/// What [`Store::offer_secret`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Adopted {
    /// The secret stored now: the offered one when `written`, else the one found.
    pub secret: [u8; 32],
    /// The key was missing and the offered secret was written.
    pub written: bool,
    /// With replicas asked for: how many acknowledged the write (`WAIT`).
    pub acknowledged: Option<u32>,
}

/// `WAIT`'s arguments: replicas, and how long to wait for them.
pub type Replicas = (u32, Duration);

impl Store {
    /// Offers `mine` as `which` secret: written when the key is missing, otherwise the stored
    /// one is returned. With `replicas`, the write is followed by `WAIT` on the same
    /// connection, so a fail-over right after it keeps the secret on the acknowledging
    /// replicas.
    pub async fn offer_secret(
        &self,
        which: SharedSecret,
        mine: &[u8; 32],
        replicas: Option<Replicas>,
    ) -> Result<Adopted, StoreError> {
        let key = match which {
            SharedSecret::Idempotency => self.keys().idempotency_secret(),
            SharedSecret::Console => self.keys().console_secret(),
        };
        let mut offer = redis::cmd("SET");
        offer.arg(&key).arg(hex(mine)).arg("NX").arg("GET");
        let (found, acknowledged): (Option<String>, Option<u32>) = match replicas {
            None => (offer.query_async(&mut self.conn()).await?, None),
            Some((count, timeout)) => {
                let mut pipe = redis::pipe();
                pipe.add_command(offer)
                    .cmd("WAIT")
                    .arg(count)
                    .arg(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
                let mut conn = self.durable_connection().await?;
                match pipe.query_async::<(Option<String>, u32)>(&mut *conn).await {
                    Ok((found, acked)) => (found, Some(acked)),
                    Err(err) => {
                        conn.discard();
                        return Err(err.into());
                    }
                }
            }
        };
        Ok(match found {
            None => Adopted { secret: *mine, written: true, acknowledged },
            Some(stored) => Adopted { secret: parse(&stored)?, written: false, acknowledged },
        })
    }
}

fn hex(secret: &[u8; 32]) -> String {
    secret.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse(stored: &str) -> Result<[u8; 32], StoreError> {
    let bytes: Vec<u8> = (0..stored.len())
        .step_by(2)
        .filter_map(|i| stored.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect();
    <[u8; 32]>::try_from(bytes).map_err(|_| StoreError::UnexpectedReply("a shared secret is not 64 hex digits".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_stored_as_64_hex_digits() {
        let secret: [u8; 32] = std::array::from_fn(|i| i as u8 * 7);
        assert_eq!(parse(&hex(&secret)).unwrap(), secret);
        for bad in ["", "ab", &"zz".repeat(32), &"ab".repeat(33)] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
