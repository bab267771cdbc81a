//! A request other than `tools/call` whose answer is made on a worker (`prompts/get`,
//! `resources/read`, `completion/complete`): a hidden task under the method's reserved tool
//! name, owned by the caller and waited for like an inline tool call, so the worker's content
//! can ask for input with MRTR and the same signed `requestState`.

use serde_json::Value;
use taskgate_shared::task::TaskId;

use crate::error::GatewayError;
use crate::mcp::inline::{self, Forwarding, InlineRun};
use crate::mcp::{Call, Reply};
use crate::mrtr;

use super::binding::{Binding, Finisher};

/// How often the worker is asked to report on a hidden task it runs (its poll interval).
const POLL_MS: u64 = 100;

/// Runs `method` (a reserved tool name) on a worker of `pool` (the pool that serves the prompt or
/// resource named) with `arguments`; `names` is what the request names (a prompt, a URI),
/// bound into any `requestState`. `cache`: the result's `(ttlMs, cacheScope)`, for methods
/// whose results carry cache hints.
pub(crate) async fn run(
    call: &Call<'_>,
    method: &'static str,
    pool: &str,
    names: &str,
    arguments: Value,
    cache: Option<(u64, &'static str)>,
) -> Result<Reply, GatewayError> {
    let binding = Binding::new(call, method, names, &arguments);
    // Only prompts/get and resources/read may answer input_required.
    let gathered = if method != taskgate_shared::tools::offerings::COMPLETE {
        mrtr::gather(
            &call.state.request_state_keys,
            call.params,
            &binding.expected(),
            taskgate_shared::task::now_ms(),
            call.state.config.requests.max_input_response_bytes,
        )?
    } else {
        mrtr::Gathered::default()
    };
    let id = TaskId::generate(call.state.config.redis.queue_shards);
    crate::limits::admit_task(call.state, &call.principal, &id, inline::hidden_ttl_ms(&call.state.config)).await?;
    // Prompts and resources are never served by a server that exchanges the caller's token.
    let shape = inline::hidden_shape(&call.state.config, pool, POLL_MS, false);
    let run = InlineRun::start(call, id, method, &arguments.to_string(), shape, &gathered).await?;
    // These methods have no progress or log notices to forward.
    let forwarding = Forwarding::new(None, None, call.state.config.streams.keep_alive);
    Finisher::new(call, binding, gathered.answers, cache).drive(run, forwarding).await
}
