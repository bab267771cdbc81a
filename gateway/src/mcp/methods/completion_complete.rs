//! `completion/complete`: suggestions for an argument of a published prompt or resource
//! template, made on a worker.

use serde_json::{Value, json};
use taskgate_shared::protocol::{RpcError, params};
use taskgate_shared::tools::offerings::COMPLETE;

use crate::catalogue::Catalogue;
use crate::error::GatewayError;
use crate::mcp::hidden;
use crate::mcp::{Call, Reply};

pub(crate) async fn run(call: &Call<'_>) -> Result<Reply, GatewayError> {
    let (reference, argument) = (params::value(call.params.reference), params::value(call.params.argument));
    let (reference, argument) = (reference.as_ref(), argument.as_ref());
    let catalogue = call.state.catalogue.offerings(|c| check(c, reference, argument).is_ok()).await;
    if !catalogue.capabilities().completions {
        return Err(GatewayError::Envelope(RpcError::method_not_found()));
    }
    // The limit is on what the worker is sent: `context` (with its `arguments`) counts too.
    let cap = call.state.config.requests.max_argument_bytes;
    let checked = check(&catalogue, reference, argument).and_then(|(names, key)| {
        let arguments = json!({
            "ref": reference,
            "argument": argument,
            "context": params::value(call.params.context).unwrap_or(Value::Null),
        });
        if arguments.to_string().len() > cap {
            return Err(RpcError::invalid_params(format!("ref, argument and context exceed the {cap}-byte limit")));
        }
        Ok((names, key, arguments))
    });
    let (names, key, arguments) = match checked {
        Ok(checked) => checked,
        Err(err) => {
            crate::limits::admit_request(call.state, &call.principal).await?;
            return Err(err.into());
        }
    };
    let pool = catalogue.offering_pool(&key).to_owned();
    hidden::run(call, COMPLETE, &pool, &names, arguments, None).await
}

/// What the reference names, and the catalogue key of the prompt or template, once it and the
/// argument are checked.
fn check(
    catalogue: &Catalogue,
    reference: Option<&Value>,
    argument: Option<&Value>,
) -> Result<(String, String), RpcError> {
    let argument_ok = argument
        .and_then(Value::as_object)
        .is_some_and(|a| a.get("name").is_some_and(Value::is_string) && a.get("value").is_some_and(Value::is_string));
    if !argument_ok {
        return Err(RpcError::invalid_params("argument must be {name, value} strings"));
    }
    let reference = reference.ok_or_else(|| RpcError::invalid_params("ref is required"))?;
    match (reference.get("type").and_then(Value::as_str), reference.get("name"), reference.get("uri")) {
        (Some("ref/prompt"), Some(Value::String(name)), _)
            if catalogue.offering(&format!("prompt/{name}")).is_some() =>
        {
            Ok((name.clone(), format!("prompt/{name}")))
        }
        (Some("ref/resource"), _, Some(Value::String(uri)))
            if catalogue.offered("template").any(|t| t.get("uriTemplate") == Some(&Value::from(uri.as_str()))) =>
        {
            Ok((uri.clone(), format!("template/{uri}")))
        }
        _ => Err(RpcError::invalid_params("ref names no published prompt or resource template")),
    }
}
