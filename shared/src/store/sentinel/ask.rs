//! Asking the sentinels which node is the master's primary.
//!
//! Every sentinel is asked at once (`SENTINEL MASTER <name>`), each within a bound, over a
//! connection kept per sentinel. Of the answers that name a primary the sentinel sees up, the
//! one with the highest configuration epoch wins: each failover raises the epoch, so a sentinel
//! that missed one (cut off with the old primary, say) names the old primary with an older
//! epoch, and is outvoted by any sentinel that saw the failover. Taking the first answer, as a
//! Sentinel client usually does, could follow such a sentinel back to the old primary.
//!
//! Outvoting needs the sentinels that saw the failover to say so, and in the middle of one they
//! often cannot: they still flag the new primary down, or they are too slow to answer in time
//! (a loaded host). So an epoch counts wherever it is read: from a sentinel that names no
//! primary up as well, and from every ask before this one. A primary named under an older epoch
//! than the newest seen is never followed ([`Pick::Stale`]): its sentinel missed a failover,
//! and the node it names is the old primary, which may be back *empty* and answering `ROLE` as
//! a primary until it is made a replica (a restarted pod). Following it would serve an empty
//! catalogue and acknowledge writes into a node about to be wiped. The one way back to a lower
//! epoch is a majority of the URL's sentinels naming that primary: sentinels redeployed without
//! their state count epochs from zero again, and only a majority can tell that from one that
//! missed a failover (Sentinel itself needs a majority to fail over).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, IntoConnectionInfo as _};

use super::SentinelUrl;
use crate::store::{SentinelLogin, StoreError, TlsPem};
use crate::telemetry::metrics::REDIS;

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
    /// know the master at all; the text says which. The master's configuration epoch, when it
    /// said one: it still tells which failovers the sentinel has seen.
    NoPrimary { why: String, epoch: Option<u64> },
    /// It could not be asked: no connection, no answer in time.
    Unreachable(String),
}

impl Answer {
    /// The configuration epoch the sentinel reported, if any.
    fn epoch(&self) -> Option<u64> {
        match self {
            Self::Primary(named) => Some(named.epoch),
            Self::NoPrimary { epoch, .. } => *epoch,
            Self::Unreachable(_) => None,
        }
    }
}

/// What the answers of one ask decide (module docs).
#[derive(Debug, PartialEq, Eq)]
enum Pick {
    /// The primary to follow.
    Primary(Named),
    /// The best primary named comes under an older epoch than `newest`, which a sentinel reports
    /// now or reported before: its sentinel missed a failover, and it is not followed.
    Stale { named: Named, newest: u64 },
    /// No sentinel names a primary up.
    Nothing,
}

/// The sentinels of one master.
pub(in crate::store) struct Sentinels {
    master: String,
    nodes: Vec<Sentinel>,
    /// The newest configuration epoch any sentinel has reported for the master, and the stale
    /// answer last warned about (to warn once per stale view, not once per ask).
    seen: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    newest: u64,
    warned: Option<Named>,
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
        Ok(Self { master: url.master.clone(), nodes, seen: Mutex::default() })
    }

    /// The primary the sentinels name (module docs), asking each within `bound`; why none, when
    /// no sentinel named one that is up under the newest epoch seen.
    pub(in crate::store) async fn primary(&self, bound: Duration) -> Result<Named, String> {
        let answers = futures::future::join_all(self.nodes.iter().map(|s| s.ask(&self.master, bound))).await;
        let each = answers.iter().map(|(_, a)| a).collect::<Vec<_>>();
        let newest_now = each.iter().filter_map(|a| a.epoch()).max().unwrap_or(0);
        let mut seen = self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let whys =
            || answers.iter().map(|(address, a)| format!("{address}: {}", why(a))).collect::<Vec<_>>().join("; ");
        match pick(&each, seen.newest, self.nodes.len()) {
            Pick::Primary(named) => {
                if named.epoch < seen.newest {
                    tracing::warn!(
                        master = %self.master,
                        primary = %named.address(),
                        epoch = named.epoch,
                        before = seen.newest,
                        "a majority of the sentinels name the primary under an older configuration epoch than seen before (were they redeployed without their state?); following them"
                    );
                    seen.newest = newest_now;
                } else {
                    seen.newest = seen.newest.max(newest_now);
                }
                seen.warned = None;
                Ok(named)
            }
            Pick::Stale { named, newest } => {
                seen.newest = seen.newest.max(newest);
                REDIS.stale_primary_refused();
                if seen.warned.as_ref() != Some(&named) {
                    tracing::warn!(
                        master = %self.master,
                        named = %named.address(),
                        epoch = named.epoch,
                        newest,
                        "a sentinel names the primary under an older configuration epoch than seen (it missed a failover); not followed"
                    );
                    seen.warned = Some(named.clone());
                }
                Err(format!(
                    "{} is named under configuration epoch {}, older than epoch {newest}: not followed ({})",
                    named.address(),
                    named.epoch,
                    whys()
                ))
            }
            Pick::Nothing => {
                seen.newest = seen.newest.max(newest_now);
                Err(whys())
            }
        }
    }
}

impl Sentinel {
    async fn ask(&self, master: &str, bound: Duration) -> (&str, Answer) {
        let answer = match tokio::time::timeout(bound, self.master_info(master, bound)).await {
            Ok(Ok(info)) => read(&info),
            // It answered, with an error: "No such master with that name", say.
            Ok(Err(err)) if err.code().is_some() => Answer::NoPrimary { why: err.to_string(), epoch: None },
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
    let said = info.get("config-epoch").and_then(|e| e.parse().ok());
    let down = flags.split(',').any(|f| f == "s_down" || f == "o_down" || f == "disconnected");
    if down || !flags.split(',').any(|f| f == "master") {
        return Answer::NoPrimary { why: format!("the primary it knows is not up (flags {flags})"), epoch: said };
    }
    let (Some(host), Some(Ok(port))) = (info.get("ip"), info.get("port").map(|p| p.parse::<u16>())) else {
        return Answer::NoPrimary { why: "its answer has no address".into(), epoch: said };
    };
    Answer::Primary(Named { host: host.clone(), port, epoch: said.unwrap_or(0) })
}

/// The primary named with the highest epoch (the first such, in the URL's order), unless it is
/// stale: named under an older epoch than another sentinel reports in `answers`, or than
/// `seen` (the newest epoch reported before) without a majority of the `sentinels` naming it
/// (module docs).
fn pick(answers: &[&Answer], seen: u64, sentinels: usize) -> Pick {
    let mut best: Option<&Named> = None;
    for answer in answers {
        if let Answer::Primary(named) = answer
            && best.is_none_or(|b| named.epoch > b.epoch)
        {
            best = Some(named);
        }
    }
    let Some(best) = best else { return Pick::Nothing };
    let newest_now = answers.iter().filter_map(|a| a.epoch()).max().unwrap_or(0);
    if best.epoch < newest_now {
        return Pick::Stale { named: best.clone(), newest: newest_now };
    }
    if best.epoch < seen {
        let naming = answers.iter().filter(|a| matches!(a, Answer::Primary(n) if n == best)).count();
        if naming * 2 <= sentinels {
            return Pick::Stale { named: best.clone(), newest: seen };
        }
    }
    Pick::Primary(best.clone())
}

fn why(answer: &Answer) -> &str {
    match answer {
        Answer::Primary(_) => "named a primary",
        Answer::NoPrimary { why, .. } | Answer::Unreachable(why) => why,
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
            assert!(matches!(read(&seen), Answer::NoPrimary { epoch: None, .. }), "{flags}");
        }
        let no_epoch = info(&[("ip", "h"), ("port", "1"), ("flags", "master")]);
        assert!(matches!(read(&no_epoch), Answer::Primary(Named { epoch: 0, .. })));
        assert!(matches!(read(&info(&[("flags", "master")])), Answer::NoPrimary { .. }));
        // A sentinel that sees no primary up still says which failovers it has seen.
        let down = info(&[("ip", "h"), ("port", "1"), ("flags", "master,s_down"), ("config-epoch", "4")]);
        assert!(matches!(read(&down), Answer::NoPrimary { epoch: Some(4), .. }));
    }

    fn host(pick: Pick) -> Option<String> {
        match pick {
            Pick::Primary(named) => Some(named.host),
            _ => None,
        }
    }

    #[test]
    fn the_highest_epoch_wins_over_the_first_answer() {
        let stale = primary("old", 1);
        let fresh = primary("new", 2);
        let silent = Answer::Unreachable("refused".into());
        assert_eq!(host(pick(&[&stale, &silent, &fresh], 0, 3)), Some("new".to_owned()));
        assert_eq!(host(pick(&[&fresh, &stale], 0, 3)), Some("new".to_owned()));
        // Equal epochs: the URL's order.
        assert_eq!(host(pick(&[&primary("a", 2), &primary("b", 2)], 0, 3)), Some("a".to_owned()));
        let down = Answer::NoPrimary { why: "o_down".into(), epoch: None };
        assert_eq!(pick(&[&silent, &down], 0, 3), Pick::Nothing);
    }

    #[test]
    fn a_primary_named_under_an_older_epoch_than_seen_is_not_followed() {
        let stale = primary("old", 1);
        let silent = Answer::Unreachable("no answer".into());
        // The sentinels that saw the failover flag the new primary down: their epoch still counts.
        let flagging = Answer::NoPrimary { why: "s_down".into(), epoch: Some(2) };
        let refused = pick(&[&stale, &flagging, &silent], 0, 3);
        assert_eq!(refused, Pick::Stale { named: Named { host: "old".into(), port: 6379, epoch: 1 }, newest: 2 });
        // They are silent, but one of them said epoch 2 before.
        assert!(matches!(pick(&[&stale, &silent, &silent], 2, 3), Pick::Stale { newest: 2, .. }));
        assert_eq!(host(pick(&[&stale, &silent, &silent], 1, 3)), Some("old".to_owned()), "no newer epoch known");
        // A majority naming it under a lower epoch: the sentinels started over (redeployed).
        let again = primary("p", 0);
        assert_eq!(host(pick(&[&again, &again, &silent], 2, 3)), Some("p".to_owned()));
        assert!(matches!(pick(&[&again, &silent, &silent], 2, 3), Pick::Stale { .. }), "one of three is no majority");
        assert!(matches!(pick(&[&again, &again, &silent, &silent], 2, 4), Pick::Stale { .. }), "two of four neither");
        assert_eq!(host(pick(&[&again], 2, 1)), Some("p".to_owned()), "a lone sentinel is its own majority");
        // A majority does not outvote a newer epoch said in the same ask.
        assert!(matches!(pick(&[&again, &again, &flagging], 0, 3), Pick::Stale { newest: 2, .. }));
    }
}
