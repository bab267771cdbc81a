//! The webhook flags of the Events extension (`--events-webhooks`, `--events-delivery` and
//! every `--events-webhook-*`), flattened into the command line, and their typed settings.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use ipnet::IpNet;

/// Whether this gateway runs the delivery loop (`--events-delivery`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DeliveryMode {
    /// Deliver beside serving requests.
    On,
    /// Never deliver (another replica does).
    Off,
    /// Deliver only: no `/mcp` traffic is expected (a dedicated deliverer with its own egress
    /// policy). The listener still serves the probes and `/metrics`.
    Only,
}

/// The webhook flags, as clap reads them.
#[derive(Debug, Clone, Args)]
pub struct WebhookArgs {
    /// Offers `events/subscribe` (webhook delivery of task events). Needs `--credentials-key`
    /// (secrets are sealed at rest) and an authenticated `--auth`.
    #[arg(long, env = "TASKGATE_EVENTS_WEBHOOKS")]
    pub events_webhooks: bool,

    /// Whether this gateway delivers webhooks: `on` (default with `--events-webhooks`), `off`,
    /// or `only` (a dedicated deliverer).
    #[arg(long, env = "TASKGATE_EVENTS_DELIVERY", value_enum)]
    pub events_delivery: Option<DeliveryMode>,

    /// Callback URL prefixes allowed (comma separated). When set, every other URL is refused
    /// (`Forbidden`); a URL under a prefix needs no verification handshake.
    #[arg(long, env = "TASKGATE_EVENTS_WEBHOOK_ALLOW", value_delimiter = ',')]
    pub events_webhook_allow: Vec<String>,

    /// Address ranges (CIDR, comma separated) allowed although not globally routable, for
    /// receivers inside the network (tests: `127.0.0.0/8`).
    #[arg(long, env = "TASKGATE_EVENTS_WEBHOOK_ALLOW_PRIVATE", value_delimiter = ',')]
    pub events_webhook_allow_private: Vec<IpNet>,

    /// Callback ports allowed (comma separated), or `any`.
    #[arg(long, env = "TASKGATE_EVENTS_WEBHOOK_PORTS", default_value = "443,8443")]
    pub events_webhook_ports: String,

    /// A file mapping names to addresses (lines of an address and names, as /etc/hosts),
    /// looked at before DNS and re-read at each resolution; the mapped address is checked like
    /// any other. For closed networks and tests.
    #[arg(long, env = "TASKGATE_EVENTS_WEBHOOK_HOSTS_FILE")]
    pub events_webhook_hosts_file: Option<PathBuf>,

    /// PEM certificates trusted as roots for callback URLs, beside the system's.
    #[arg(long, env = "TASKGATE_EVENTS_WEBHOOK_CA_FILE")]
    pub events_webhook_ca_file: Option<PathBuf>,

    /// Shortest lifetime granted to a subscription, in milliseconds.
    #[arg(long, env = "TASKGATE_EVENTS_WEBHOOK_MIN_TTL_MS", default_value_t = 60_000)]
    pub events_webhook_min_ttl_ms: u64,

    /// Longest lifetime granted to a subscription (and the grant when none is asked), in
    /// milliseconds.
    #[arg(long, env = "TASKGATE_EVENTS_WEBHOOK_MAX_TTL_MS", default_value_t = 86_400_000)]
    pub events_webhook_max_ttl_ms: u64,

    /// Grants `ttlMs: null` (no expiry). Off: such a request gets the longest lifetime.
    #[arg(long, env = "TASKGATE_EVENTS_WEBHOOK_NO_EXPIRY")]
    pub events_webhook_no_expiry: bool,

    /// Subscriptions one principal may hold.
    #[arg(long, env = "TASKGATE_EVENTS_WEBHOOK_MAX_PER_PRINCIPAL", default_value_t = 100)]
    pub events_webhook_max_per_principal: u64,

    /// Subscriptions one tenant may hold.
    #[arg(long, env = "TASKGATE_EVENTS_WEBHOOK_MAX_PER_TENANT", default_value_t = 1_000)]
    pub events_webhook_max_per_tenant: u64,

    /// Timeout of one POST (delivery or verification), in milliseconds.
    #[arg(long, env = "TASKGATE_EVENTS_WEBHOOK_TIMEOUT_MS", default_value_t = 5_000)]
    pub events_webhook_timeout_ms: u64,

    /// First retry delay, in milliseconds; doubled per attempt (at most 5 minutes), jittered
    /// between half and all of it.
    #[arg(long, env = "TASKGATE_EVENTS_WEBHOOK_RETRY_BASE_MS", default_value_t = 1_000)]
    pub events_webhook_retry_base_ms: u64,

    /// Attempts per event before it is dead-lettered.
    #[arg(long, env = "TASKGATE_EVENTS_WEBHOOK_MAX_ATTEMPTS", default_value_t = 8)]
    pub events_webhook_max_attempts: u32,

    /// Dead letters in a row after which a subscription is suspended until refreshed.
    #[arg(long, env = "TASKGATE_EVENTS_WEBHOOK_SUSPEND_AFTER", default_value_t = 3)]
    pub events_webhook_suspend_after: u32,

    /// How long a deliverer's claim on a subscription lasts unless renewed, in milliseconds.
    #[arg(long, env = "TASKGATE_EVENTS_WEBHOOK_LEASE_MS", default_value_t = 10_000)]
    pub events_webhook_lease_ms: u64,

    /// How long a verified (principal, URL) needs no new handshake, in milliseconds.
    #[arg(long, env = "TASKGATE_EVENTS_WEBHOOK_VERIFIED_TTL_MS", default_value_t = 86_400_000)]
    pub events_webhook_verified_ttl_ms: u64,
}

/// The ports callbacks may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ports {
    Any,
    Only(Vec<u16>),
}

impl Ports {
    pub fn allows(&self, port: u16) -> bool {
        match self {
            Self::Any => true,
            Self::Only(ports) => ports.contains(&port),
        }
    }
}

/// `--events-webhooks`, checked.
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    pub delivery: DeliveryMode,
    pub allow: Vec<String>,
    pub allow_private: Vec<IpNet>,
    pub ports: Ports,
    pub hosts_file: Option<PathBuf>,
    pub ca_file: Option<PathBuf>,
    pub min_ttl: Duration,
    pub max_ttl: Duration,
    pub no_expiry: bool,
    pub max_per_principal: u64,
    pub max_per_tenant: u64,
    pub timeout: Duration,
    pub retry_base: Duration,
    pub max_attempts: u32,
    pub suspend_after: u32,
    pub lease: Duration,
    pub verified_ttl: Duration,
}

/// Why the webhook flags cannot run.
#[derive(Debug, thiserror::Error)]
pub enum WebhookConfigError {
    #[error("--events-webhooks needs --credentials-key: subscription secrets are sealed at rest")]
    NoCredentialsKey,
    #[error("--events-webhook-ports must be `any` or ports from 1 to 65535, comma separated")]
    Ports,
    #[error("--events-webhook-allow entries must be https URLs")]
    AllowPrefix,
    #[error("--events-webhook-min-ttl-ms must be at least 1000 and not above --events-webhook-max-ttl-ms")]
    Ttl,
    #[error("--events-webhook-max-attempts and --events-webhook-suspend-after must be at least 1")]
    Attempts,
}

impl WebhookArgs {
    /// `None` when webhooks are off; the errors otherwise, all of them.
    pub fn settings(&self, has_credentials_key: bool) -> Result<Option<WebhookSettings>, Vec<WebhookConfigError>> {
        if !self.events_webhooks {
            return Ok(None);
        }
        let mut errors = Vec::new();
        if !has_credentials_key {
            errors.push(WebhookConfigError::NoCredentialsKey);
        }
        let ports = parse_ports(&self.events_webhook_ports).map_err(|err| errors.push(err)).ok();
        if self.events_webhook_allow.iter().any(|prefix| !prefix.starts_with("https://")) {
            errors.push(WebhookConfigError::AllowPrefix);
        }
        if self.events_webhook_min_ttl_ms < 1_000 || self.events_webhook_min_ttl_ms > self.events_webhook_max_ttl_ms {
            errors.push(WebhookConfigError::Ttl);
        }
        if self.events_webhook_max_attempts == 0 || self.events_webhook_suspend_after == 0 {
            errors.push(WebhookConfigError::Attempts);
        }
        let (Some(ports), true) = (ports, errors.is_empty()) else { return Err(errors) };
        let ms = Duration::from_millis;
        let lease = ms(self.events_webhook_lease_ms.max(1_000));
        Ok(Some(WebhookSettings {
            delivery: self.events_delivery.unwrap_or(DeliveryMode::On),
            allow: self.events_webhook_allow.iter().map(|p| p.trim().to_owned()).filter(|p| !p.is_empty()).collect(),
            allow_private: self.events_webhook_allow_private.clone(),
            ports,
            hosts_file: self.events_webhook_hosts_file.clone(),
            ca_file: self.events_webhook_ca_file.clone(),
            min_ttl: ms(self.events_webhook_min_ttl_ms),
            max_ttl: ms(self.events_webhook_max_ttl_ms),
            no_expiry: self.events_webhook_no_expiry,
            max_per_principal: self.events_webhook_max_per_principal,
            max_per_tenant: self.events_webhook_max_per_tenant,
            // At most half the lease: renewed every third of it, a valid lease always has more
            // than a POST's time left, and a POST never outlives it (delivery checks).
            timeout: ms(self.events_webhook_timeout_ms.max(100)).min(lease / 2),
            retry_base: ms(self.events_webhook_retry_base_ms.max(1)),
            max_attempts: self.events_webhook_max_attempts,
            suspend_after: self.events_webhook_suspend_after,
            lease,
            verified_ttl: ms(self.events_webhook_verified_ttl_ms.max(1_000)),
        }))
    }
}

fn parse_ports(text: &str) -> Result<Ports, WebhookConfigError> {
    if text.trim().eq_ignore_ascii_case("any") {
        return Ok(Ports::Any);
    }
    let ports = text
        .split(',')
        .map(|p| p.trim().parse::<u16>().ok().filter(|p| *p != 0))
        .collect::<Option<Vec<u16>>>()
        .filter(|p| !p.is_empty())
        .ok_or(WebhookConfigError::Ports)?;
    Ok(Ports::Only(ports))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_a_list_or_any() {
        assert_eq!(parse_ports("443,8443").unwrap(), Ports::Only(vec![443, 8443]));
        assert_eq!(parse_ports("any").unwrap(), Ports::Any);
        assert!(parse_ports("0").is_err() && parse_ports("").is_err() && parse_ports("x").is_err());
        assert!(Ports::Only(vec![443]).allows(443) && !Ports::Only(vec![443]).allows(80));
    }
}
