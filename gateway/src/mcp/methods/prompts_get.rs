//! `prompts/get`: a published prompt's messages, made on a worker (which may ask for input).

use serde_json::{Map, Value, json};
use taskgate_shared::protocol::{Params, RpcError, params};
use taskgate_shared::tools::offerings::PROMPTS_GET;

use crate::error::GatewayError;
use crate::mcp::hidden;
use crate::mcp::{Call, Reply};

pub(crate) async fn run(call: &Call<'_>) -> Result<Reply, GatewayError> {
    let name = params::text(call.params.name).unwrap_or_default();
    let key = format!("prompt/{name}");
    let catalogue = call.state.catalogue.offerings(|c| c.offering(&key).is_some()).await;
    if !catalogue.capabilities().prompts {
        return Err(GatewayError::Envelope(RpcError::method_not_found()));
    }
    let cap = call.state.config.requests.max_argument_bytes;
    let checked = check(call.params, |name| catalogue.offering(&format!("prompt/{name}")).is_some()).and_then(|c| {
        if Value::Object(c.1.clone()).to_string().len() > cap {
            return Err(RpcError::invalid_params(format!("arguments exceed the {cap}-byte limit")));
        }
        Ok(c)
    });
    let (name, arguments) = match checked {
        Ok(checked) => checked,
        Err(err) => {
            crate::limits::admit_request(call.state, &call.principal).await?;
            return Err(err.into());
        }
    };
    let pool = catalogue.offering_pool(&format!("prompt/{name}")).to_owned();
    hidden::run(call, PROMPTS_GET, &pool, &name, json!({ "name": name, "arguments": arguments }), None).await
}

/// The prompt's name and arguments (strings only), or why not.
fn check(sent: &Params<'_>, known: impl Fn(&str) -> bool) -> Result<(String, Map<String, Value>), RpcError> {
    let name = params::text(sent.name).ok_or_else(|| RpcError::invalid_params("name is required"))?;
    let name = name.as_ref();
    if !known(name) {
        return Err(RpcError::invalid_params(format!("unknown prompt {name:?}")).with_data(json!({ "name": name })));
    }
    let arguments = match params::value(sent.arguments) {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(arguments)) if arguments.values().all(Value::is_string) => arguments,
        Some(_) => return Err(RpcError::invalid_params("arguments must be an object of strings")),
    };
    Ok((name.to_owned(), arguments))
}
