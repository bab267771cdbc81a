//! The configuration both binaries share: where Redis is, how to log in to it, and how its keys
//! are named. Each binary flattens [`RedisArgs`] into its command line and turns it into
//! [`RedisSettings`] once, at start-up: files are read then, so a missing one stops the start.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::store::{Endpoint, SentinelLogin, TlsPem};

/// The Redis flags of every taskgate binary.
#[derive(Debug, Clone, clap::Args)]
pub struct RedisArgs {
    /// Redis URL: `redis://[user:password@]host:port`, `rediss://…` for TLS,
    /// `redis+cluster://host:port,host:port` (`rediss+cluster://…`) for a Cluster, or
    /// `redis+sentinel://host:26379,host:26379/<master>[?db=N]` (`rediss+sentinel://…`) for a
    /// primary that Sentinel manages (the login in the URL is the data nodes').
    #[arg(long, env = "TASKGATE_REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    pub redis_url: String,

    /// Redis ACL user name, instead of the URL's.
    #[arg(long, env = "TASKGATE_REDIS_USERNAME")]
    pub redis_username: Option<String>,

    /// File holding the Redis password (of the ACL user, or `requirepass`), instead of the URL's.
    /// It may instead come from the `TASKGATE_REDIS_PASSWORD` environment variable; it is never a
    /// flag, so it never shows in `ps`.
    #[arg(long)]
    pub redis_password_file: Option<PathBuf>,

    /// The sentinels' ACL user name, when they require a login of their own.
    #[arg(long, env = "TASKGATE_REDIS_SENTINEL_USERNAME")]
    pub redis_sentinel_username: Option<String>,

    /// File holding the sentinels' password (their `requirepass`), when they require one; it may
    /// instead come from the `TASKGATE_REDIS_SENTINEL_PASSWORD` environment variable.
    #[arg(long)]
    pub redis_sentinel_password_file: Option<PathBuf>,

    /// PEM file of the CA certificates that sign the Redis server's certificate (a private CA),
    /// trusted instead of the system's roots. Needs a `rediss://` URL.
    #[arg(long, env = "TASKGATE_REDIS_CA_FILE")]
    pub redis_ca_file: Option<PathBuf>,

    /// PEM file of this client's certificate chain, for mutual TLS (with `--redis-client-key`).
    #[arg(long, env = "TASKGATE_REDIS_CLIENT_CERT", requires = "redis_client_key")]
    pub redis_client_cert: Option<PathBuf>,

    /// PEM file of this client's private key, for mutual TLS (with `--redis-client-cert`).
    #[arg(long, env = "TASKGATE_REDIS_CLIENT_KEY", requires = "redis_client_cert")]
    pub redis_client_key: Option<PathBuf>,

    /// Keep every command within one Cluster slot on a single endpoint, for a proxy in front of
    /// a cluster that refuses commands across slots (Azure Managed Redis with the Enterprise
    /// clustering policy): workers read each shard on its own, as on a Cluster.
    #[arg(long, env = "TASKGATE_REDIS_SINGLE_SLOT")]
    pub redis_single_slot: bool,

    /// Prefix of every Redis key and channel, so deployments and test runs can share a Redis.
    /// Gateways and workers of one deployment must use the same one.
    #[arg(long, env = "TASKGATE_NAMESPACE", default_value = "taskgate")]
    pub namespace: String,

    /// Number of dispatch-queue shards (1..=256). Task ids carry their shard, so this may grow
    /// later but must not shrink while tasks of the higher shards live. Gateways and workers
    /// must use the same value.
    #[arg(long, env = "TASKGATE_QUEUE_SHARDS", default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub queue_shards: u16,

    /// Timeout of each Redis command and connection attempt, in milliseconds. Default 2000; a
    /// worker uses at most a sixth of its lease (`--lease-ms`), and refuses a longer one.
    #[arg(long, env = "TASKGATE_REDIS_TIMEOUT_MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub redis_timeout_ms: Option<u64>,
}

/// [`RedisArgs`], checked, with its files read.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    pub endpoint: Endpoint,
    pub namespace: String,
    pub queue_shards: u16,
    pub timeout: Duration,
}

/// A Redis flag that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedisConfigError {
    #[error("--namespace must be non-empty and contain no '{{', '}}' or whitespace (it goes inside Cluster hash tags)")]
    BadNamespace,
    #[error("{flag} {path}: {reason}")]
    Unreadable { flag: &'static str, path: PathBuf, reason: String },
}

impl RedisArgs {
    /// The settings, with `default_timeout` when no timeout was given.
    pub fn settings(&self, default_timeout: Duration) -> Result<RedisSettings, RedisConfigError> {
        let namespace = &self.namespace;
        if namespace.is_empty() || namespace.contains(['{', '}']) || namespace.contains(char::is_whitespace) {
            return Err(RedisConfigError::BadNamespace);
        }
        let password = match &self.redis_password_file {
            Some(path) => Some(read("--redis-password-file", path)?.trim_end_matches(['\r', '\n']).to_owned()),
            None => std::env::var("TASKGATE_REDIS_PASSWORD").ok().filter(|p| !p.is_empty()),
        };
        let sentinel_password = match &self.redis_sentinel_password_file {
            Some(path) => Some(read("--redis-sentinel-password-file", path)?.trim_end_matches(['\r', '\n']).to_owned()),
            None => std::env::var("TASKGATE_REDIS_SENTINEL_PASSWORD").ok().filter(|p| !p.is_empty()),
        };
        let client = match (&self.redis_client_cert, &self.redis_client_key) {
            (Some(cert), Some(key)) => {
                Some((read("--redis-client-cert", cert)?.into_bytes(), read("--redis-client-key", key)?.into_bytes()))
            }
            _ => None,
        };
        let ca = self.redis_ca_file.as_ref().map(|path| read("--redis-ca-file", path)).transpose()?;
        let endpoint = Endpoint {
            url: self.redis_url.clone(),
            username: self.redis_username.clone().filter(|u| !u.is_empty()),
            password,
            tls: TlsPem { ca: ca.map(String::into_bytes), client },
            single_slot: self.redis_single_slot,
            sentinel: SentinelLogin {
                username: self.redis_sentinel_username.clone().filter(|u| !u.is_empty()),
                password: sentinel_password,
            },
        };
        Ok(RedisSettings {
            endpoint,
            namespace: namespace.clone(),
            queue_shards: self.queue_shards,
            timeout: self.redis_timeout_ms.map_or(default_timeout, Duration::from_millis),
        })
    }
}

fn read(flag: &'static str, path: &Path) -> Result<String, RedisConfigError> {
    std::fs::read_to_string(path).map_err(|err| RedisConfigError::Unreadable {
        flag,
        path: path.to_owned(),
        reason: err.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        redis: RedisArgs,
    }

    #[test]
    fn defaults_and_namespace_rules() {
        let cli = Cli::parse_from(["x"]);
        let settings = cli.redis.settings(Duration::from_secs(2)).unwrap();
        assert_eq!((settings.namespace.as_str(), settings.queue_shards), ("taskgate", 16));
        assert_eq!(settings.timeout, Duration::from_secs(2));
        for bad in ["", "a{b", "a}b", "a b"] {
            let cli = Cli::parse_from(["x", "--namespace", bad]);
            assert_eq!(cli.redis.settings(Duration::from_secs(2)).unwrap_err(), RedisConfigError::BadNamespace);
        }
        let cli = Cli::parse_from(["x", "--redis-timeout-ms", "250"]);
        assert_eq!(cli.redis.settings(Duration::from_secs(2)).unwrap().timeout, Duration::from_millis(250));
        assert!(Cli::try_parse_from(["x", "--queue-shards", "0"]).is_err());
        assert!(Cli::try_parse_from(["x", "--redis-timeout-ms", "0"]).is_err());
    }
}
