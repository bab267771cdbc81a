//! One multiplexed, self-reconnecting Redis connection per process, cloned into every request:
//! no pool checkout on the request path.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Client};

use super::{Keys, StoreError, scripts};

/// A handle on Redis and the namespace's key names. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    client: Client,
    conn: ConnectionManager,
    timeout: Duration,
    keys: Keys,
}

impl Store {
    /// Builds the handle without connecting, so a process can start (and report itself not
    /// ready) while Redis is down. Every command and connection attempt is bounded by
    /// `timeout`.
    pub fn connect_lazy(url: &str, namespace: &str, timeout: Duration) -> Result<Self, StoreError> {
        let client = Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), config)?;
        Ok(Self { client, conn, timeout, keys: Keys::new(namespace) })
    }

    /// A connection for one operation. Clones share the underlying socket.
    pub fn conn(&self) -> ConnectionManager {
        self.conn.clone()
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// A dedicated connection for blocking commands (`XREADGROUP BLOCK`), which would stall
    /// every other caller of a shared multiplexed connection. Its response timeout covers
    /// `block` plus the usual command timeout.
    pub async fn blocking_connection(&self, block: Duration) -> Result<MultiplexedConnection, StoreError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(block + self.timeout));
        Ok(self.client.get_multiplexed_async_connection_with_config(&config).await?)
    }

    /// A pub/sub connection of its own.
    pub async fn pubsub(&self) -> Result<redis::aio::PubSub, StoreError> {
        Ok(tokio::time::timeout(self.timeout, self.client.get_async_pubsub())
            .await
            .map_err(|_| StoreError::Timeout(self.timeout))??)
    }

    /// `PING`, bounded by the command timeout.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let ping = redis::cmd("PING");
        let call = ping.query_async::<String>(&mut conn);
        match tokio::time::timeout(self.timeout, call).await {
            Ok(reply) => reply.map(drop).map_err(StoreError::from),
            Err(_) => Err(StoreError::Timeout(self.timeout)),
        }
    }

    /// Loads every script, so a broken one fails at boot rather than on a request.
    pub async fn load_scripts(&self) -> Result<(), StoreError> {
        let mut conn = self.conn();
        for script in scripts::all() {
            script.load_async(&mut conn).await?;
        }
        Ok(())
    }

    /// `WAIT replicas timeout`: how many replicas acknowledged this connection's writes.
    pub async fn wait_for_replicas(&self, replicas: u32, timeout: Duration) -> Result<u32, StoreError> {
        let mut conn = self.conn();
        let acked: u32 = redis::cmd("WAIT")
            .arg(replicas)
            .arg(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX))
            .query_async(&mut conn)
            .await?;
        Ok(acked)
    }
}
