//! What a failed connection or command means to the person running taskgate: the cause in a
//! few words and what to do about it. Logged beside the error (which, for `NOPERM`, names the
//! command the ACL user may not run) and the redacted address, while the process retries.

use super::StoreError;

/// A cause and a remedy, both fixed text: nothing of the connection's secrets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Diagnosis {
    pub cause: &'static str,
    pub hint: &'static str,
}

impl StoreError {
    /// Why Redis could not be used, as far as the error tells.
    pub fn diagnosis(&self) -> Diagnosis {
        let (code, text) = match self {
            Self::Redis(err) => (err.code().unwrap_or_default().to_owned(), err.to_string().to_ascii_lowercase()),
            Self::Timeout(_) => return TIMEOUT,
            Self::Config(_) => return CONFIG,
            Self::PoolExhausted { .. } => return EXHAUSTED,
            Self::NoPrimary(_) => return NO_PRIMARY,
            Self::UnexpectedReply(_) | Self::Corrupt(_) | Self::KeyReused | Self::OtherOutbox(_) => return UNEXPECTED,
        };
        classify(&code, &text)
    }
}

const TIMEOUT: Diagnosis = Diagnosis {
    cause: "no answer in time",
    hint: "check that the host is reachable from here (network policy, security group, firewall); \
           --redis-timeout-ms bounds each attempt",
};
const EXHAUSTED: Diagnosis = Diagnosis {
    cause: "more callers wanted a dedicated connection than the process reserved",
    hint: "a bug in taskgate's sizing of its connection pools; the caller retries (report it)",
};
const NO_PRIMARY: Diagnosis = Diagnosis {
    cause: "no sentinel named a primary that answers",
    hint: "check the master name at the end of the redis+sentinel:// URL, that the sentinels are reachable, and \
           their login (--redis-sentinel-username, --redis-sentinel-password-file); during a failover this passes",
};
const CONFIG: Diagnosis = Diagnosis {
    cause: "the Redis settings cannot work",
    hint: "fix --redis-url and the --redis-* flags (docs/redis.md)",
};
const UNEXPECTED: Diagnosis = Diagnosis {
    cause: "Redis answered something taskgate did not expect",
    hint: "taskgate needs Redis 7 or Valkey 7 with Lua scripting and streams (docs/redis.md)",
};

fn classify(code: &str, text: &str) -> Diagnosis {
    // A Sentinel lookup that failed, carried as the connection error of the command that needed it.
    if text.contains("no redis primary") {
        return NO_PRIMARY;
    }
    match code {
        "WRONGPASS" | "NOAUTH" => {
            return Diagnosis {
                cause: "authentication failed",
                hint: "check the user and password: the URL's user:password@, --redis-username, \
                       --redis-password-file or TASKGATE_REDIS_PASSWORD",
            };
        }
        "NOREPLICAS" => {
            return Diagnosis {
                cause: "the primary has too few replicas in sync to take writes (min-replicas-to-write)",
                hint: "a replica is down, lagging or cut off from the primary; writes resume once enough \
                       replicas acknowledge again, or once Sentinel has failed over and taskgate follows \
                       the new primary",
            };
        }
        "NOPERM" => {
            return Diagnosis {
                cause: "the ACL user may not run a command or touch a key taskgate needs",
                hint: "give the user the rule set of docs/redis.md, with this namespace's key and channel patterns",
            };
        }
        _ => {}
    }
    let has = |needle: &str| text.contains(needle);
    if has("unknown command") {
        Diagnosis {
            cause: "this Redis does not offer a command taskgate needs",
            hint: "taskgate needs Redis 7 or Valkey 7 with Lua scripting and streams; docs/redis.md lists \
                   the services that lack them",
        }
    } else if has("certificaterequired") {
        Diagnosis {
            cause: "TLS handshake failed: the server asks for a client certificate",
            hint: "give --redis-client-cert and --redis-client-key (mutual TLS)",
        }
    } else if has("fatal alert") {
        Diagnosis {
            cause: "TLS handshake failed: the server refused it",
            hint: "check the TLS port, the TLS versions the server allows, and for mutual TLS \
                   --redis-client-cert and --redis-client-key",
        }
    } else if has("certificate") || has("unknownissuer") || has("notvalidforname") {
        Diagnosis {
            cause: "TLS: the server's certificate is not trusted",
            hint: "for a private CA give --redis-ca-file; the URL's host must be a name (or address) \
                   the certificate is issued for",
        }
    } else if has("corrupt message") || has("invalidcontenttype") {
        Diagnosis {
            cause: "TLS handshake failed: the server does not speak TLS on this port",
            hint: "use redis:// for a plain port, or the server's TLS port with rediss://",
        }
    } else if has("handshake") || has("tls") || has("alert") {
        Diagnosis {
            cause: "TLS handshake failed",
            hint: "check the TLS port, and for mutual TLS --redis-client-cert and --redis-client-key",
        }
    } else if has("connection refused") {
        Diagnosis { cause: "nothing listens at this address", hint: "check the host and port of --redis-url" }
    } else if has("reset by peer") || has("broken pipe") || has("closed") || has("unexpected end") {
        Diagnosis {
            cause: "the server closed the connection at once",
            hint: "if the server requires TLS, use rediss://; otherwise check its client limits and logs",
        }
    } else if has("dns") || has("lookup") || has("name or service not known") {
        Diagnosis { cause: "the host name does not resolve", hint: "check the host of --redis-url" }
    } else {
        Diagnosis {
            cause: "Redis could not be used",
            hint: "see the error; docs/redis.md lists what taskgate needs of Redis",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_are_told_apart() {
        assert_eq!(classify("WRONGPASS", "wrongpass invalid username-password pair").cause, "authentication failed");
        assert!(
            classify("NOPERM", "noperm user t has no permissions to run the 'xreadgroup' command")
                .hint
                .contains("rule set")
        );
        assert!(classify("", "invalid peer certificate: unknownissuer").cause.contains("not trusted"));
        assert!(
            classify("", "received corrupt message of type invalidcontenttype").cause.contains("does not speak TLS")
        );
        assert!(classify("", "connection reset by peer (os error 104)").hint.contains("rediss://"));
        assert!(classify("ERR", "err unknown command 'xautoclaim'").cause.contains("does not offer"));
        assert_eq!(classify("", "connection refused (os error 111)").cause, "nothing listens at this address");
        assert!(classify("NOREPLICAS", "noreplicas not enough good replicas to write.").cause.contains("min-replicas"));
        let required = classify("", "received fatal alert: certificaterequired");
        assert!(required.cause.contains("client certificate") && required.hint.contains("--redis-client-cert"));
    }
}
