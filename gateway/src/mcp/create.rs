//! Writing a new task for a call, and ending one nobody follows: the create (with the
//! replicas' acknowledgement when configured), its abandonment when the create failed, and the
//! tenant's active-task slot.

use taskgate_shared::credentials::{Credential, Holder, SUBJECT_TOKEN};
use taskgate_shared::protocol::{ErrorKind, RpcError};
use taskgate_shared::store::Created;
use taskgate_shared::task::TaskId;
use taskgate_shared::telemetry::trace;

use super::{Call, client_traceparent};
use crate::error::GatewayError;
use crate::state::AppState;

/// How long a new task lives, how often it may be polled, and how it starts.
pub(crate) struct TaskShape<'a> {
    /// The worker pool whose queue the task goes on: the catalogue's route for the tool.
    pub(crate) pool: &'a str,
    pub(crate) ttl_ms: u64,
    pub(crate) poll_interval_ms: u64,
    pub(crate) status_message: Option<&'a str>,
    /// A keyed create's fingerprint (`idempotency::fingerprint`); `None` without a key.
    pub(crate) fingerprint: Option<&'a str>,
    /// The tool's server exchanges the caller's own token: hand it to the worker, sealed.
    pub(crate) subject_token: bool,
    /// The caller's own related task ids (`relatedTaskIds`, checked): kept beside the task for
    /// its worker. Empty for none.
    pub(crate) related: &'a [String],
}

/// How sure a new task must be before its handle leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    /// Written on the primary (hidden tasks of inline calls: their result is the reply).
    Primary,
    /// Also acknowledged by `--durability-replicas` replicas, when configured.
    Replicated,
}

/// Writes a new task for this call (owner, capabilities, trace context and the answers
/// gathered so far come from the call), or finds the one an earlier request with the same
/// idempotency key made ([`Created::Replayed`]: nothing counted). A create without a key that
/// failed, or that the replicas did not acknowledge, is abandoned before the error is returned:
/// nobody holds its handle, so no work may run for it and it must not hold its tenant's
/// active-task slot. A keyed create is never abandoned: its task may be the one an earlier
/// request with the same key made (this one a retry), and a retry of this one finds it.
pub(crate) async fn write_task(
    call: &Call<'_>,
    id: &TaskId,
    tool: &str,
    arguments: &str,
    shape: TaskShape<'_>,
    gathered: &crate::mrtr::Gathered,
    durability: Durability,
) -> Result<Created, GatewayError> {
    let state = call.state;
    if shape.subject_token {
        // Before the create, so that a worker never claims the task before its token is there.
        hand_over_subject_token(call, id, shape.ttl_ms).await?;
    }
    if !shape.related.is_empty() {
        // Before the create too, so that the claim finds them: one `SET`, only when the call
        // named tasks of its caller's own.
        let ids = serde_json::to_string(shape.related).unwrap_or_else(|_| "[]".into());
        state.store.put_related(id, &ids, shape.ttl_ms).await?;
    }
    let answers: Vec<(String, String)> = gathered.answers.iter().map(|(k, v)| (k.clone(), v.to_string())).collect();
    let steps: Vec<(String, String)> = gathered.carried.steps.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let (capabilities, declares_tasks) = taskgate_shared::store::stored_capabilities(&call.meta.capabilities);
    // The worker's span joins the trace as a child of this request's span when traces are
    // exported; otherwise the client's own context is passed on.
    let traceparent = trace::traceparent_of(&tracing::Span::current()).or_else(|| client_traceparent(call));
    let owner = call.principal.owner();
    let task = taskgate_shared::store::NewTask {
        id,
        owner: &owner,
        tool,
        pool: shape.pool,
        arguments,
        ttl_ms: shape.ttl_ms,
        poll_interval_ms: shape.poll_interval_ms,
        status_message: shape.status_message,
        traceparent: traceparent.as_deref(),
        client_capabilities: &capabilities,
        declares_tasks,
        answers: &answers,
        steps: &steps,
        related: !shape.related.is_empty(),
        tool_state: gathered.carried.resume.as_deref(),
        counted: counts_active(state),
        history: state.config.console.is_some(),
        fingerprint: shape.fingerprint,
        weight: state.config.tenants.weight(&owner.tenant),
        events: state.config.events.as_ref().and_then(|e| e.for_tenant(&owner.tenant)),
    };
    tracing::Span::current().record("task_id", id.as_str());
    let durable = match durability {
        Durability::Replicated => state.config.durability,
        Durability::Primary => None,
    };
    let replicas = durable.map_or(0, |d| d.replicas.get());
    let written = match durable {
        None => state.store.create_task(task).await.map(|created| (created, 0)),
        Some(d) => state.store.create_task_durable(task, replicas, d.timeout).await,
    };
    let keyed = shape.fingerprint.is_some();
    let created = match written {
        Ok((created, acked)) if acked >= replicas => created,
        Ok((_, acked)) if keyed => {
            tracing::error!(task_id = %id, wanted = replicas, acked, "keyed create not acknowledged by replicas yet");
            let err = RpcError::new(
                ErrorKind::Internal,
                "the task could not be made durable yet; retry with the same idempotency key",
            );
            return Err(GatewayError::Method(err));
        }
        Ok((_, acked)) => {
            tracing::error!(task_id = %id, wanted = replicas, acked, "create not acknowledged by replicas; abandoning it");
            abandon_task(state, id, &owner, "The task could not be made durable.").await;
            let err = RpcError::new(ErrorKind::Internal, "the task could not be made durable; it was not created");
            return Err(GatewayError::Method(err));
        }
        Err(taskgate_shared::store::StoreError::KeyReused) => return Err(GatewayError::KeyReused),
        Err(err) if keyed => return Err(GatewayError::Storage(err)),
        Err(err) => {
            // The script may or may not have run: abandon whatever it left.
            abandon_task(state, id, &owner, "The task could not be created.").await;
            return Err(GatewayError::Storage(err));
        }
    };
    if let Created::New { .. } = created {
        crate::metrics::METRICS.tasks_created.with_label_values(&[tool]).inc();
    }
    Ok(created)
}

/// Seals the caller's own bearer JWT, bound to the caller and the task, into the task's
/// `subject` key, for the worker of a server that exchanges it (RFC 8693). It lives as long as
/// the token or the task, whichever is shorter. Nothing is written for a caller not
/// authenticated by a JWT, or without `--credentials-key`: the worker then refuses the call
/// with the typed error that asks for a call signed in. The token is never logged.
async fn hand_over_subject_token(call: &Call<'_>, id: &TaskId, task_ttl_ms: u64) -> Result<(), GatewayError> {
    let Some(expires_at_s) = call.principal.jwt_expires_at_s else { return Ok(()) };
    let Some(keys) = &call.state.credential_keys else {
        // An operator's omission, which every such call would otherwise only show as the
        // caller's error: said once.
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            tracing::warn!(
                "a tool whose server exchanges the caller's token was called, and this gateway has no --credentials-key to hand the token over: such calls fail"
            );
        });
        return Ok(());
    };
    let Ok(token) = crate::auth::bearer(call.headers) else { return Ok(()) };
    let now = taskgate_shared::task::now_ms();
    let ttl_ms = expires_at_s.saturating_mul(1_000).saturating_sub(now).min(task_ttl_ms);
    if ttl_ms == 0 {
        return Ok(());
    }
    let values = std::collections::BTreeMap::from([(SUBJECT_TOKEN.to_owned(), token.to_owned())]);
    let Ok(value) = Credential::new(values) else {
        tracing::warn!(task_id = %id, "the caller's token is too long to hand to the worker; not handed over");
        return Ok(());
    };
    let holder = Holder::subject_token(&call.principal.tenant, &call.principal.subject, id.as_str());
    let sealed = keys.seal(&holder, &value, now, "gateway").map_err(|err| {
        tracing::error!(task_id = %id, error = %err, "could not seal the caller's token");
        GatewayError::Method(RpcError::new(ErrorKind::Internal, "the call could not be prepared"))
    })?;
    call.state.store.put_subject_token(id, &sealed.to_json(), ttl_ms).await?;
    Ok(())
}

/// Whether new tasks count against their tenant's active-task cap.
fn counts_active(state: &AppState) -> bool {
    state.config.tenants.max_active_tasks.is_some()
}

/// Ends a task the gateway made and nobody follows (an inline call given up, a create that
/// failed or was not made durable); the store frees its active-task slot. A task a worker is
/// running is only flagged here; that worker ends it. Best effort: what is left behind expires
/// with the task.
pub(crate) async fn abandon_task(state: &AppState, id: &TaskId, owner: &taskgate_shared::task::Owner, message: &str) {
    if let Err(err) = state.store.abandon_task(id, owner, message, counts_active(state)).await {
        tracing::warn!(task_id = %id, error = %err, "could not abandon the task; it expires by its TTL");
    }
}
