//! The configuration both binaries share: where Redis is and how its keys are named. Each
//! binary flattens [`RedisArgs`] into its command line and turns it into [`RedisSettings`] once,
//! at start-up.

use std::time::Duration;

/// The Redis flags of every taskgate binary.
#[derive(Debug, Clone, clap::Args)]
pub struct RedisArgs {
    /// Redis URL: `redis://…` (`rediss://` for TLS), or `redis+cluster://host:port,host:port`
    /// for a Cluster.
    #[arg(long, env = "TASKGATE_REDIS_URL", default_value = "redis://127.0.0.1:6379")]
    pub redis_url: String,

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

/// [`RedisArgs`], checked.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    pub url: String,
    pub namespace: String,
    pub queue_shards: u16,
    pub timeout: Duration,
}

/// A Redis flag that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedisConfigError {
    #[error("--namespace must be non-empty and contain no '{{', '}}' or whitespace (it goes inside Cluster hash tags)")]
    BadNamespace,
}

impl RedisArgs {
    /// The settings, with `default_timeout` when no timeout was given.
    pub fn settings(&self, default_timeout: Duration) -> Result<RedisSettings, RedisConfigError> {
        let namespace = &self.namespace;
        if namespace.is_empty() || namespace.contains(['{', '}']) || namespace.contains(char::is_whitespace) {
            return Err(RedisConfigError::BadNamespace);
        }
        Ok(RedisSettings {
            url: self.redis_url.clone(),
            namespace: namespace.clone(),
            queue_shards: self.queue_shards,
            timeout: self.redis_timeout_ms.map_or(default_timeout, Duration::from_millis),
        })
    }
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
