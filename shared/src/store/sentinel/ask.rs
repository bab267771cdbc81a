//! Asking the sentinels which node is the master's primary.
//!
//! Every sentinel is asked at once (`SENTINEL MASTER <name>`), each within a bound, over a
//! connection kept per sentinel. Of the answers that name a primary the sentinel sees up, the
//! one with the highest configuration epoch wins: each failover raises the epoch, so a sentinel
//! that missed one (cut off with the old primary, say) names the old primary with an older
//! epoch, and is outvoted by any sentinel that saw the failover. Taking the first answer, as a
//! Sentinel client usually does, could follow such a sentinel back to the old primary.

use std::collections::HashMap;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, IntoConnectionInfo as _};

use super::SentinelUrl;
use crate::store::{SentinelLogin, StoreError, TlsPem};

/// The primary a sentinel names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::store) struct Named {
    pub(in crate::store) host: String,
    pub(in crate::store) port: u16,
    /// The sentinel's configuration epoch of the master: higher after every failover.
    pub(in crate::store) epoch: u64,
}

impl Named {
    /// `host:port`, as logged and compared.
    pub(in crate::store) fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// What one sentinel said.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// A primary it sees up.
    Primary(Named),
    /// It knows the master but sees no primary up (down, or a failover under way), or does not
    /// know the master at all; the text says which.
    NoPrimary(String),
    /// It could not be asked: no connection, no answer in time.
    Unreachable(String),
}

/// The sentinels of one master.
pub(in crate::store) struct Sentinels {
    master: String,
    nodes: Vec<Sentinel>,
}

struct Sentinel {
    /// `host:port`, for messages.
    address: String,
    client: Client,
    /// Kept between asks; dropped when it fails.
    conn: tokio::sync::Mutex<Option<MultiplexedConnection>>,
}

impl Sentinels {
    /// Clients for the URL's sentinels, with their own login and, for `rediss+sentinel://`, TLS.
    pub(in crate::store) fn new(url: &SentinelUrl, login: &SentinelLogin, tls: &TlsPem) -> Result<Self, StoreError> {
        let scheme = if url.tls { "rediss" } else { "redis" };
        let nodes = url
            .sentinels
            .iter()
            .map(|(host, port)| {
                let bracketed = if host.contains(':') { format!("[{host}]") } else { host.clone() };
                let info = format!("{scheme}://{bracketed}:{port}").into_connection_info()?;
                let mut settings = info.redis_settings().clone();
                if let Some(username) = &login.username {
                    settings = settings.set_username(username);
                }
                if let Some(password) = &login.password {
                    settings = settings.set_password(password);
                }
                let info = info.set_redis_settings(settings);
                let client = if url.tls && !tls.is_empty() {
                    Client::build_with_tls(info, tls.certificates())?
                } else {
                    Client::open(info)?
                };
                Ok(Sentinel { address: format!("{host}:{port}"), client, conn: tokio::sync::Mutex::new(None) })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(Self { master: url.master.clone(), nodes })
    }

    /// The primary the sentinels name (module docs), asking each within `bound`; why none, when
    /// no sentinel named one that is up.
    pub(in crate::store) async fn primary(&self, bound: Duration) -> Result<Named, String> {
        let answers = futures::future::join_all(self.nodes.iter().map(|s| s.ask(&self.master, bound))).await;
        pick(&answers.iter().map(|(_, a)| a).collect::<Vec<_>>()).ok_or_else(|| {
            answers.iter().map(|(address, answer)| format!("{address}: {}", why(answer))).collect::<Vec<_>>().join("; ")
        })
    }
}

impl Sentinel {
    async fn ask(&self, master: &str, bound: Duration) -> (&str, Answer) {
        let answer = match tokio::time::timeout(bound, self.master_info(master, bound)).await {
            Ok(Ok(info)) => read(&info),
            // It answered, with an error: "No such master with that name", say.
            Ok(Err(err)) if err.code().is_some() => Answer::NoPrimary(err.to_string()),
            Ok(Err(err)) => Answer::Unreachable(err.to_string()),
            Err(_) => Answer::Unreachable(format!("no answer within {bound:?}")),
        };
        (&self.address, answer)
    }

    /// `SENTINEL MASTER <master>`; a connection that failed is not kept. Cancel-safe: a
    /// connection is kept only once made.
    async fn master_info(&self, master: &str, bound: Duration) -> redis::RedisResult<HashMap<String, String>> {
        let mut cached = self.conn.lock().await;
        let mut conn = match cached.as_ref() {
            Some(conn) => conn.clone(),
            None => {
                let config =
                    AsyncConnectionConfig::new().set_connection_timeout(Some(bound)).set_response_timeout(Some(bound));
                let conn = self.client.get_multiplexed_async_connection_with_config(&config).await?;
                *cached = Some(conn.clone());
                conn
            }
        };
        let reply = redis::cmd("SENTINEL").arg("MASTER").arg(master).query_async(&mut conn).await;
        if let Err(err) = &reply
            && (err.is_io_error() || err.is_connection_dropped() || err.is_timeout() || err.is_unrecoverable_error())
        {
            *cached = None;
        }
        reply
    }
}

/// One sentinel's view of the master, from the fields of `SENTINEL MASTER`.
fn read(info: &HashMap<String, String>) -> Answer {
    let flags = info.get("flags").map(String::as_str).unwrap_or_default();
    let down = flags.split(',').any(|f| f == "s_down" || f == "o_down" || f == "disconnected");
    if down || !flags.split(',').any(|f| f == "master") {
        return Answer::NoPrimary(format!("the primary it knows is not up (flags {flags})"));
    }
    let (Some(host), Some(Ok(port))) = (info.get("ip"), info.get("port").map(|p| p.parse::<u16>())) else {
        return Answer::NoPrimary("its answer has no address".into());
    };
    let epoch = info.get("config-epoch").and_then(|e| e.parse().ok()).unwrap_or(0);
    Answer::Primary(Named { host: host.clone(), port, epoch })
}

/// The primary named with the highest epoch (the first such, in the URL's order).
fn pick(answers: &[&Answer]) -> Option<Named> {
    let mut best: Option<&Named> = None;
    for answer in answers {
        if let Answer::Primary(named) = answer
            && best.is_none_or(|b| named.epoch > b.epoch)
        {
            best = Some(named);
        }
    }
    best.cloned()
}

fn why(answer: &Answer) -> &str {
    match answer {
        Answer::Primary(_) => "named a primary",
        Answer::NoPrimary(why) | Answer::Unreachable(why) => why,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn primary(host: &str, epoch: u64) -> Answer {
        Answer::Primary(Named { host: host.into(), port: 6379, epoch })
    }

    #[test]
    fn a_primary_counts_only_while_its_sentinel_sees_it_up() {
        let up = info(&[("ip", "10.0.0.1"), ("port", "6379"), ("flags", "master"), ("config-epoch", "3")]);
        assert_eq!(read(&up), primary("10.0.0.1", 3));
        for flags in ["master,s_down", "master,o_down", "master,disconnected", "slave"] {
            let seen = info(&[("ip", "10.0.0.1"), ("port", "6379"), ("flags", flags)]);
            assert!(matches!(read(&seen), Answer::NoPrimary(_)), "{flags}");
        }
        let no_epoch = info(&[("ip", "h"), ("port", "1"), ("flags", "master")]);
        assert!(matches!(read(&no_epoch), Answer::Primary(Named { epoch: 0, .. })));
        assert!(matches!(read(&info(&[("flags", "master")])), Answer::NoPrimary(_)));
    }

    #[test]
    fn the_highest_epoch_wins_over_the_first_answer() {
        let stale = primary("old", 1);
        let fresh = primary("new", 2);
        let silent = Answer::Unreachable("refused".into());
        assert_eq!(pick(&[&stale, &silent, &fresh]).map(|n| n.host), Some("new".to_owned()));
        assert_eq!(pick(&[&fresh, &stale]).map(|n| n.host), Some("new".to_owned()));
        // Equal epochs: the URL's order.
        assert_eq!(pick(&[&primary("a", 2), &primary("b", 2)]).map(|n| n.host), Some("a".to_owned()));
        assert_eq!(pick(&[&silent, &Answer::NoPrimary("o_down".into())]), None);
    }
}
