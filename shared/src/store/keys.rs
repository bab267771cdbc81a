//! Every Redis key and channel name, built in one place.
//!
//! **Hash-tag choice.** A task's keys carry the hash tag of its *queue shard* (`{sNN}`), not of
//! the task itself. The record, its input hashes, the shard's dispatch stream and the shard's
//! lease index therefore sit in one Cluster slot, so every transition (create + enqueue, claim +
//! ack + lease index, finish + index cleanup) is a single script: one round trip, with no key
//! name built inside Lua. The cost: one slot holds a 1/K share of all tasks, so K (the shard
//! count, default 16, at most 256) must exceed the number of Cluster masters several times over
//! to spread load. The shard is encoded in the task id, so K may grow later without moving
//! existing tasks; shrinking it strands the tasks of removed shards.
//!
//! The namespace prefixes every key and channel, so several deployments can share a Redis.

use crate::task::TaskId;

/// The consumer group every worker reads the dispatch streams with.
pub const WORKER_GROUP: &str = "workers";

/// The worker pool a worker joins unless told otherwise; its queues keep the names they had
/// before pools existed, so an upgrade moves no key.
pub const DEFAULT_POOL: &str = "default";

/// The longest pool name: it goes into key names and metrics labels.
pub const MAX_POOL_LEN: usize = 32;

/// Whether `name` can name a pool: 1 to [`MAX_POOL_LEN`] characters of `[a-z0-9-]`, so it can
/// never carry a hash tag (`{`), a separator the catalogue splits on (a space) or a label
/// Prometheus mangles.
pub fn is_pool_name(name: &str) -> bool {
    (1..=MAX_POOL_LEN).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Key and channel names of one namespace.
#[derive(Debug, Clone)]
pub struct Keys {
    ns: String,
}

/// The keys one task's scripts touch. All share the shard's hash tag.
#[derive(Debug, Clone)]
pub struct TaskKeys {
    /// HASH: the task record.
    pub record: String,
    /// HASH: outstanding input requests, key -> request JSON.
    pub inputs: String,
    /// HASH: received input responses, key -> response JSON.
    pub answers: String,
    /// SET: every input key ever issued (never reused).
    pub issued: String,
    /// HASH: the task's recorded durable steps, step name -> result JSON; expires with the
    /// record.
    pub steps: String,
    /// STRING: the client's last poll, for poll-rate enforcement.
    pub poll: String,
    /// STRING: the task's `result` or `error` when too long to keep the record compact
    /// (`aside` in the scripts' prelude); expires with the record.
    pub outcome: String,
    /// STRING: the task's arguments when too long to keep the record compact (`aside`);
    /// expires with the record.
    pub args: String,
    /// STREAM: the shard's dispatch queue of the `default` pool (another pool's:
    /// [`Keys::queue`]).
    pub stream: String,
    /// ZSET: the shard's lease index, task id -> lease expiry (ms). One per shard whatever the
    /// pool, so any worker's reaper finds any expired lease.
    pub leases: String,
    /// LIST: the task's transitions, JSON each (`timeline` in the scripts' prelude).
    pub timeline: String,
    /// STRING: the caller's own token, sealed for the worker of a server that exchanges it
    /// (RFC 8693); written by the gateway before the create, expiring with the token or the
    /// task, whichever is first.
    pub subject: String,
    /// STREAM: the outbox the task's status changes are appended to (docs/events.md, 2.3):
    /// its owner's on the shard. [`Keys::task`] fills the shard's placeholder (`outbox:-`,
    /// never written); a caller that knows the owner sets [`Keys::outbox`], and a script whose
    /// record names another outbox answers with it, writing nothing (`other_outbox`).
    pub outbox: String,
    /// STRING: the caller's own task ids this task relates to (a JSON array; `relatedTaskIds`),
    /// written by the gateway before the create, only when there are any; read with the claim;
    /// expires with the task.
    pub rel: String,
}

/// A tenant's fleet-wide limit keys.
#[derive(Debug, Clone)]
pub struct TenantKeys {
    /// STRING: GCRA theoretical arrival time of requests.
    pub requests: String,
    /// STRING: GCRA theoretical arrival time of task creations.
    pub creations: String,
    /// ZSET: task ids not yet terminal, scored by expiry (ms).
    pub active: String,
}

/// The tool catalogue's keys.
#[derive(Debug, Clone)]
pub struct CatalogueKeys {
    /// HASH: tool name -> ToolSpec JSON, published by workers.
    pub specs: String,
    /// ZSET: tool name -> when the last worker heartbeat that served it runs out (ms).
    pub live: String,
    /// ZSET: workers' configuration digests -> when they run out (ms).
    pub digests: String,
    /// HASH: worker id -> its status at its last heartbeat (JSON).
    pub workers: String,
    /// ZSET: worker id -> when its last heartbeat runs out (ms).
    pub workers_live: String,
    /// ZSET: `"<pool> <tool>"` -> when the last heartbeat of a worker of that pool serving that
    /// tool runs out (ms): liveness per (tool, pool).
    pub serving: String,
    /// HASH: `"<pool> <tool>"` -> when that pair last became live (ms): what picks the route.
    pub serving_since: String,
    /// HASH: tool -> the pool new tasks of it are queued on (docs/design.md, "Worker pools").
    pub routes: String,
    /// HASH: pool -> when a worker of it last sent a heartbeat (ms): every pool the console
    /// shows, a pool whose workers are all gone included.
    pub pools: String,
}

/// The dispatch keys of one pool on one shard (docs/design.md, "Fair dispatch"). Which task runs
/// next is decided by `ready`; the stream only wakes workers and carries their deliveries.
#[derive(Debug, Clone)]
pub struct QueueKeys {
    /// STREAM: one wake-up entry per enqueue, read by the pool's workers through the consumer
    /// group; each claim consumes one, whichever task it takes.
    pub stream: String,
    /// ZSET: the queued task ids, each scored by its virtual start tag (start-time fair
    /// queuing); a claim takes the lowest.
    pub ready: String,
    /// HASH: `floor` (the tag of the last task taken) and `t:<tenant>` (the tag of the tenant's
    /// last enqueued task) while that is above the floor: claims drop spent tags. Deleted
    /// whenever `ready` empties, when every entry is spent.
    pub fair: String,
}

/// The keys of one webhook subscription, in its tenant's hook bucket (`{hNN}`): every
/// subscription of a tenant is in one slot, so one script sees its caps exactly.
#[derive(Debug, Clone)]
pub struct HookKeys {
    /// HASH: the subscription record (docs/events.md, 2.8); expires with the grant.
    pub record: String,
    /// LIST: its dead letters, newest first, capped; expires with the record.
    pub dead: String,
    /// ZSET: the bucket's subscriptions, id -> lease expiry (ms; 0 = free to claim).
    pub index: String,
    /// ZSET: the tenant's subscription ids -> expiry (ms; +inf = none): its cap.
    pub tenant: String,
    /// ZSET: the principal's subscription ids -> expiry: its cap.
    pub principal: String,
    /// STRING: a verified (principal, URL), with a TTL.
    pub verified: String,
}

/// How many webhook hook buckets there are: fixed, so every deliverer scans the same keys.
pub const HOOK_BUCKETS: u8 = 16;

/// What follows the shard's tag in a task's record key, before its id.
const TASK: &str = ":task:";

/// The suffixes of a task's keys after its record key, for [`Keys::task`] and [`TaskLayout`].
const ANSWERS: &str = ":ans";
const STEPS: &str = ":steps";
const ARGS: &str = ":args";
const TIMELINE: &str = ":timeline";
const REL: &str = ":rel";
const INPUTS: &str = ":in";
const OUTCOME: &str = ":out";

/// A shard's task key layout, for a script that derives a task's keys from its id (all in the
/// shard's hash tag, so in the slot of the queue keys it is handed): `prefix + id` is the
/// record, the record key and a suffix each other key.
#[derive(Debug, Clone)]
pub struct TaskLayout {
    pub prefix: String,
    pub answers: &'static str,
    pub steps: &'static str,
    pub args: &'static str,
    pub timeline: &'static str,
    pub rel: &'static str,
    pub inputs: &'static str,
    pub outcome: &'static str,
}

/// The keys of one queue shard.
#[derive(Debug, Clone)]
pub struct ShardKeys {
    /// The `default` pool's queue of the shard (another pool's: [`Keys::queue`]).
    pub stream: String,
    pub leases: String,
}

impl Keys {
    pub fn new(ns: impl Into<String>) -> Self {
        Self { ns: ns.into() }
    }

    /// Every read and write of a task builds these: joined with `push_str` into strings sized up
    /// front, not `format!` (whose machinery cost more than the copying, fourteen times a read).
    pub fn task(&self, id: &TaskId) -> TaskKeys {
        let ns = self.ns.as_str();
        let tag = shard_tag(id.shard());
        let record = join(&[ns, ":", &tag, TASK, id.as_str()]);
        let of = |suffix: &str| join(&[&record, suffix]);
        TaskKeys {
            inputs: of(INPUTS),
            answers: of(ANSWERS),
            issued: of(":issued"),
            steps: of(STEPS),
            poll: of(":poll"),
            outcome: of(OUTCOME),
            args: of(ARGS),
            stream: join(&[ns, ":", &tag, ":queue"]),
            leases: join(&[ns, ":", &tag, ":leases"]),
            timeline: of(TIMELINE),
            subject: of(":subject"),
            outbox: join(&[ns, ":", &tag, ":outbox:", OUTBOX_PLACEHOLDER]),
            rel: of(REL),
            record,
        }
    }

    /// What a task's record key is on `shard` before its id: `<ns>:{sNN}:task:`.
    fn task_prefix(&self, shard: u8) -> String {
        join(&[&self.ns, ":", &shard_tag(shard), TASK])
    }

    /// The layout of the task keys a batch claim reads, for a script that is handed task ids
    /// rather than keys (`claim_batch`): the record key is `prefix + id`, the others the record
    /// key and their suffix. The same pieces [`Keys::task`] builds from, so the layout stays
    /// defined here alone.
    pub fn task_layout(&self, shard: u8) -> TaskLayout {
        TaskLayout {
            prefix: self.task_prefix(shard),
            answers: ANSWERS,
            steps: STEPS,
            args: ARGS,
            timeline: TIMELINE,
            rel: REL,
            inputs: INPUTS,
            outcome: OUTCOME,
        }
    }

    /// STRING: what a batch claim of `worker` whose first entry was `entry` took (one task id,
    /// or `-`, per entry), on `queue`'s stream; it expires after a lease (`claim_batch`).
    pub fn claim_receipt(&self, queue: &QueueKeys, worker: &str, entry: &str) -> String {
        format!("{}:claimed:{worker}:{entry}", queue.stream)
    }

    /// STREAM: one owner's outbox on a shard (docs/events.md, 2.3): an entry per status change
    /// of a task of `owner` (its [`owner_digest`]) on `shard`, in the shard's hash tag so the
    /// transition's own script appends it.
    pub fn outbox(&self, shard: u8, owner: &str) -> String {
        format!("{}:{}:outbox:{owner}", self.ns, shard_tag(shard))
    }

    /// ZSET of a shard's tasks, task id -> expiry (ms): what the console lists, with `tenant`
    /// the index of one tenant's tasks (the tenant follows the shard's tag, so it cannot move
    /// the key to another slot).
    pub fn task_index(&self, shard: u8, tenant: Option<&str>) -> String {
        let (ns, tag) = (&self.ns, shard_tag(shard));
        match tenant {
            None => format!("{ns}:{tag}:index"),
            Some(tenant) => format!("{ns}:{tag}:index:tenant:{tenant}"),
        }
    }

    pub fn shard(&self, shard: u8) -> ShardKeys {
        let ns = &self.ns;
        let tag = shard_tag(shard);
        ShardKeys { stream: format!("{ns}:{tag}:queue"), leases: format!("{ns}:{tag}:leases") }
    }

    /// The dispatch keys of `pool` on `shard`, in the shard's hash tag (one slot with the shard's
    /// records and lease index). The `default` pool keeps the pre-pool stream name.
    pub fn queue(&self, shard: u8, pool: &str) -> QueueKeys {
        let (ns, tag) = (&self.ns, shard_tag(shard));
        let stream =
            if pool == DEFAULT_POOL { format!("{ns}:{tag}:queue") } else { format!("{ns}:{tag}:pool:{pool}:queue") };
        QueueKeys { ready: format!("{stream}:ready"), fair: format!("{stream}:fair"), stream }
    }

    /// A tenant's limit keys. They share a hash tag derived from the tenant (hashed, so no
    /// tenant name can break the tag), so one script checks them all.
    pub fn tenant(&self, tenant: &str) -> TenantKeys {
        let tag = tenant_tag(tenant);
        let ns = &self.ns;
        TenantKeys {
            requests: format!("{ns}:{{t{tag}}}:rate:requests"),
            creations: format!("{ns}:{{t{tag}}}:rate:creations"),
            active: format!("{ns}:{{t{tag}}}:active"),
        }
    }

    /// HASH: a tenant's upstream credentials, sealed (store/credentials.rs), in the tenant's
    /// hash tag.
    pub fn credentials(&self, tenant: &str) -> String {
        let tag = tenant_tag(tenant);
        format!("{}:{{t{tag}}}:credentials", self.ns)
    }

    /// SET: the tenants that have (or had) an upstream credential.
    pub fn credential_tenants(&self) -> String {
        format!("{}:credentials:tenants", self.ns)
    }

    /// The keys of webhook subscription `id` of `tenant`, created by `principal` (an owner
    /// digest, hex), the verification key naming the `(principal, url)` digest `verified`.
    pub fn hook(&self, tenant: &str, principal: &str, id: &str, verified: &str) -> HookKeys {
        let ns = &self.ns;
        let bucket = hook_bucket(tenant);
        let tag = format!("{{h{bucket:02x}}}");
        HookKeys {
            record: format!("{ns}:{tag}:hook:{id}"),
            dead: format!("{ns}:{tag}:hook:{id}:dead"),
            index: self.hook_index(bucket),
            tenant: format!("{ns}:{tag}:hooks:tenant:{}", tenant_tag(tenant)),
            principal: format!("{ns}:{tag}:hooks:by:{principal}"),
            verified: format!("{ns}:{tag}:verified:{verified}"),
        }
    }

    /// ZSET: the subscriptions of hook bucket `bucket`, id -> lease expiry (ms).
    pub fn hook_index(&self, bucket: u8) -> String {
        format!("{}:{{h{bucket:02x}}}:hooks", self.ns)
    }

    /// The record and dead-letter keys of subscription `id` in `bucket` (what a deliverer that
    /// found the id in the bucket's index names).
    pub fn hook_in(&self, bucket: u8, id: &str) -> (String, String) {
        let (ns, tag) = (&self.ns, format!("{{h{bucket:02x}}}"));
        (format!("{ns}:{tag}:hook:{id}"), format!("{ns}:{tag}:hook:{id}:dead"))
    }

    /// The catalogue's keys, in one Cluster slot so one script keeps them consistent.
    pub fn catalogue(&self) -> CatalogueKeys {
        let ns = &self.ns;
        CatalogueKeys {
            specs: format!("{ns}:{{catalogue}}:specs"),
            live: format!("{ns}:{{catalogue}}:live"),
            digests: format!("{ns}:{{catalogue}}:digests"),
            workers: format!("{ns}:{{catalogue}}:workers"),
            workers_live: format!("{ns}:{{catalogue}}:workers:live"),
            serving: format!("{ns}:{{catalogue}}:serving"),
            serving_since: format!("{ns}:{{catalogue}}:serving:since"),
            routes: format!("{ns}:{{catalogue}}:routes"),
            pools: format!("{ns}:{{catalogue}}:pools"),
        }
    }

    /// The secret the console's CSRF tokens are made with, when none is configured: random,
    /// written by the first gateway that needs it, read (and restored when lost) by every
    /// other (`store::secrets`).
    pub fn console_secret(&self) -> String {
        format!("{}:console:secret", self.ns)
    }

    /// The secret idempotency keys become task ids under, when none is configured: random,
    /// written by the first gateway that needs it, read (and restored when lost) by every
    /// other (`store::secrets`).
    pub fn idempotency_secret(&self) -> String {
        format!("{}:idempotency:secret", self.ns)
    }

    /// Channel of task change events: `"<taskId> <version> <status>"`. Wake-ups only: readers
    /// re-read the record (invariant 1, docs/architecture.md).
    pub fn events_channel(&self) -> String {
        format!("{}:events", self.ns)
    }

    /// The events channel of one shard, in the shard's hash tag: on a Cluster, a script
    /// publishes its task's events there with `SPUBLISH`, so they stay on the shard's node
    /// instead of crossing the cluster bus to every node.
    pub fn shard_events_channel(&self, shard: u8) -> String {
        format!("{}:{}:events", self.ns, shard_tag(shard))
    }

    /// Channel of ephemeral notifications from running tools (progress, log), JSON with a
    /// `taskId`. Only inline calls forward them; they are never stored.
    pub fn notify_channel(&self) -> String {
        format!("{}:notify", self.ns)
    }

    /// Prefix of the per-worker signal channels; a script appends the lease holder's id.
    pub fn signal_prefix(&self) -> String {
        format!("{}:signal:", self.ns)
    }

    /// The signal channel of one worker.
    pub fn signal_channel(&self, worker: &str) -> String {
        format!("{}{worker}", self.signal_prefix())
    }
}

/// What stands for the owner in an outbox key when the caller does not know it (the reaper).
const OUTBOX_PLACEHOLDER: &str = "-";

/// An owner as outbox keys name it: the hex of the first 16 bytes of SHA-256 over
/// [`Owner::key`](crate::task::Owner::key). A plain digest, not keyed by a gateway secret:
/// workers run the scripts that append, and need it too.
pub fn owner_digest(owner: &crate::task::Owner) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(owner.key().as_bytes());
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `text` can be an [`owner_digest`]: 32 lowercase hex digits, so a value read back
/// from a record never carries a hash tag into a key.
pub fn is_owner_digest(text: &str) -> bool {
    text.len() == 32 && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn shard_tag(shard: u8) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut tag = String::with_capacity(5);
    tag.push_str("{s");
    tag.push(char::from(HEX[usize::from(shard >> 4)]));
    tag.push(char::from(HEX[usize::from(shard & 0xf)]));
    tag.push('}');
    tag
}

/// `parts` in one string, allocated once.
fn join(parts: &[&str]) -> String {
    let mut out = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        out.push_str(part);
    }
    out
}

/// A tenant's hook bucket: a hash of the tenant, so all its subscriptions share one slot.
pub(super) fn hook_bucket(tenant: &str) -> u8 {
    use sha2::Digest as _;
    sha2::Sha256::digest(tenant.as_bytes())[0] % HOOK_BUCKETS
}

/// A tenant's hash tag: hashed, so no tenant name can break the tag.
fn tenant_tag(tenant: &str) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(tenant.as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tasks_keys_share_its_shards_hash_tag() {
        let keys = Keys::new("tg");
        let id = TaskId::parse(&format!("tsk_0a{}", "1".repeat(32))).unwrap();
        let k = keys.task(&id);
        for key in [
            &k.record,
            &k.inputs,
            &k.answers,
            &k.issued,
            &k.steps,
            &k.poll,
            &k.outcome,
            &k.args,
            &k.stream,
            &k.leases,
            &k.timeline,
            &k.subject,
            &k.outbox,
            &k.rel,
        ] {
            assert!(key.starts_with("tg:{s0a}:"), "{key}");
        }
        let record = format!("tg:{{s0a}}:task:{id}");
        assert_eq!(k.record, record);
        assert_eq!(
            [&k.inputs, &k.outcome, &k.poll, &k.rel],
            [":in", ":out", ":poll", ":rel"].map(|s| record.clone() + s).each_ref()
        );
        assert_eq!([&k.stream, &k.leases, &k.outbox], ["tg:{s0a}:queue", "tg:{s0a}:leases", "tg:{s0a}:outbox:-"]);
        assert_eq!(keys.task_layout(10).prefix, "tg:{s0a}:task:");
        assert_eq!([shard_tag(0), shard_tag(255)], ["{s00}", "{sff}"]);
        assert_eq!(keys.shard(10).stream, k.stream);
        assert_eq!(keys.queue(10, DEFAULT_POOL).stream, k.stream, "the default pool keeps the pre-pool name");
        let gpu = keys.queue(10, "gpu");
        assert_eq!(gpu.stream, "tg:{s0a}:pool:gpu:queue");
        for key in [&gpu.ready, &gpu.fair] {
            assert!(key.starts_with("tg:{s0a}:pool:gpu:queue:"), "{key}");
        }
    }

    #[test]
    fn an_owners_outbox_is_in_the_shards_hash_tag() {
        let keys = Keys::new("tg");
        let owner = crate::task::Owner { tenant: "acme".into(), principal: "alice".into() };
        let digest = owner_digest(&owner);
        assert!(is_owner_digest(&digest), "{digest}");
        assert_eq!(keys.outbox(10, &digest), format!("tg:{{s0a}}:outbox:{digest}"));
        let other = crate::task::Owner { tenant: "acme/alice".into(), principal: String::new() };
        assert_ne!(owner_digest(&other), digest, "the escaped key keeps owners apart");
        for bad in ["", "-", "{s00}", &"A".repeat(32), &"a".repeat(31)] {
            assert!(!is_owner_digest(bad), "{bad}");
        }
    }

    #[test]
    fn pool_names_are_short_lowercase_words() {
        for good in ["default", "gpu", "a", "gpu-2", &"x".repeat(32)] {
            assert!(is_pool_name(good), "{good}");
        }
        for bad in ["", "GPU", "gpu pool", "{s00}", "gpu_2", "é", &"x".repeat(33)] {
            assert!(!is_pool_name(bad), "{bad}");
        }
    }
}
