//! The fields of an elicitation form, read from its `requestedSchema`: what to ask and how to
//! check an answer. Pure: the terminal side is in `prompt`.

use serde_json::{Map, Value};

/// One property of a form.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Field {
    pub(crate) key: String,
    /// The title, or the key.
    pub(crate) label: String,
    pub(crate) description: Option<String>,
    pub(crate) required: bool,
    pub(crate) kind: Kind,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kind {
    Bool {
        default: Option<bool>,
    },
    /// One of a list: the values sent and the labels shown.
    Choice {
        values: Vec<Value>,
        labels: Vec<String>,
        default: Option<usize>,
    },
    /// Several of a list.
    Choices {
        values: Vec<Value>,
        labels: Vec<String>,
        defaults: Vec<bool>,
    },
    Number {
        integer: bool,
        min: Option<f64>,
        max: Option<f64>,
        default: Option<Value>,
    },
    Text {
        min_len: Option<u64>,
        max_len: Option<u64>,
        default: Option<String>,
    },
}

/// The fields of `schema` (an object schema of primitive properties), in the order given.
pub(crate) fn fields(schema: &Value) -> Vec<Field> {
    let required: Vec<&str> =
        schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else { return Vec::new() };
    properties
        .iter()
        .map(|(key, property)| Field {
            key: key.clone(),
            label: crate::text::clean(property.get("title").and_then(Value::as_str).unwrap_or(key)),
            description: property.get("description").and_then(Value::as_str).map(crate::text::clean),
            required: required.contains(&key.as_str()),
            kind: kind(property),
        })
        .collect()
}

fn kind(property: &Value) -> Kind {
    let default = property.get("default");
    if let Some((values, labels)) = options(property) {
        let default = default.and_then(|d| values.iter().position(|v| v == d));
        return Kind::Choice { values, labels, default };
    }
    match property.get("type").and_then(Value::as_str) {
        Some("boolean") => Kind::Bool { default: default.and_then(Value::as_bool) },
        Some("array") => {
            let (values, labels) = property.get("items").and_then(options).unwrap_or_default();
            let chosen: Vec<&Value> = default.and_then(Value::as_array).map(|d| d.iter().collect()).unwrap_or_default();
            let defaults = values.iter().map(|v| chosen.contains(&v)).collect();
            Kind::Choices { values, labels, defaults }
        }
        Some(t @ ("integer" | "number")) => Kind::Number {
            integer: t == "integer",
            min: property.get("minimum").and_then(Value::as_f64),
            max: property.get("maximum").and_then(Value::as_f64),
            default: default.filter(|d| d.is_number()).cloned(),
        },
        _ => Kind::Text {
            min_len: property.get("minLength").and_then(Value::as_u64),
            max_len: property.get("maxLength").and_then(Value::as_u64),
            default: default.and_then(Value::as_str).map(str::to_owned),
        },
    }
}

/// The choices of an enum property: `enum` (with the legacy `enumNames` as labels), or
/// `oneOf`/`anyOf` of `{const, title}`.
fn options(property: &Value) -> Option<(Vec<Value>, Vec<String>)> {
    if let Some(values) = property.get("enum").and_then(Value::as_array) {
        let names = property.get("enumNames").and_then(Value::as_array);
        let labels = values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                names.and_then(|n| n.get(i)).and_then(Value::as_str).map_or_else(|| show(v), crate::text::clean)
            })
            .collect();
        // An empty list cannot be chosen from: the property is asked by its type instead.
        return (!values.is_empty()).then(|| (values.clone(), labels));
    }
    let variants = property.get("oneOf").or_else(|| property.get("anyOf"))?.as_array()?;
    let values: Vec<Value> = variants.iter().filter_map(|v| v.get("const").cloned()).collect();
    if values.is_empty() {
        return None;
    }
    let labels = variants
        .iter()
        .filter(|v| v.get("const").is_some())
        .map(|v| v.get("title").and_then(Value::as_str).map_or_else(|| show(&v["const"]), crate::text::clean))
        .collect();
    Some((values, labels))
}

fn show(value: &Value) -> String {
    crate::text::clean(&value.as_str().map_or_else(|| value.to_string(), str::to_owned))
}

impl Field {
    /// Checks a typed answer: the value to send, `None` for an optional field left empty.
    pub(crate) fn parse(&self, text: &str) -> Result<Option<Value>, String> {
        let text = text.trim();
        if text.is_empty() {
            return if self.required { Err("an answer is required".into()) } else { Ok(None) };
        }
        match &self.kind {
            Kind::Number { integer, min, max, .. } => {
                let number: f64 = text.parse().map_err(|_| format!("{text:?} is not a number"))?;
                if *integer && number.fract() != 0.0 {
                    return Err(format!("{text:?} is not a whole number"));
                }
                if min.is_some_and(|m| number < m) || max.is_some_and(|m| number > m) {
                    return Err(format!("must be within {}", range(*min, *max)));
                }
                Ok(Some(if *integer { Value::from(number as i64) } else { Value::from(number) }))
            }
            Kind::Text { min_len, max_len, .. } => {
                let len = text.chars().count() as u64;
                if min_len.is_some_and(|m| len < m) || max_len.is_some_and(|m| len > m) {
                    return Err(format!(
                        "must be {} characters long",
                        range(min_len.map(|v| v as f64), max_len.map(|v| v as f64))
                    ));
                }
                Ok(Some(Value::from(text)))
            }
            Kind::Bool { .. } => match text.to_ascii_lowercase().as_str() {
                "y" | "yes" | "true" => Ok(Some(Value::Bool(true))),
                "n" | "no" | "false" => Ok(Some(Value::Bool(false))),
                _ => Err("answer yes or no".into()),
            },
            Kind::Choice { values, labels, .. } => values
                .iter()
                .zip(labels)
                .find(|(v, l)| show(v) == text || l.as_str() == text)
                .map(|(v, _)| Some(v.clone()))
                .ok_or_else(|| format!("choose one of {}", labels.join(", "))),
            Kind::Choices { .. } => Err("choose from the list".into()),
        }
    }
}

fn range(min: Option<f64>, max: Option<f64>) -> String {
    match (min, max) {
        (Some(a), Some(b)) => format!("{a}..{b}"),
        (Some(a), None) => format!("at least {a}"),
        (None, Some(b)) => format!("at most {b}"),
        (None, None) => "any".into(),
    }
}

/// An accepted form answer.
pub(crate) fn accept(content: Map<String, Value>) -> Value {
    serde_json::json!({ "action": "accept", "content": content })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_primitive_kind_is_read_with_its_default() {
        let schema = json!({
            "type": "object",
            "properties": {
                "approved": {"type": "boolean", "default": true, "title": "Approve?"},
                "size": {"type": "string", "enum": ["s", "l"], "enumNames": ["Small", "Large"], "default": "l"},
                "tier": {"type": "string", "oneOf": [{"const": "a", "title": "Gold"}, {"const": "b"}]},
                "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "default": ["y"]},
                "count": {"type": "integer", "minimum": 1, "maximum": 5, "default": 2},
                "note": {"type": "string", "maxLength": 4, "description": "why"}
            },
            "required": ["approved", "count"]
        });
        let fields = fields(&schema);
        let by = |k: &str| fields.iter().find(|f| f.key == k).unwrap().clone();
        assert_eq!(by("approved").kind, Kind::Bool { default: Some(true) });
        assert_eq!(by("approved").label, "Approve?");
        assert!(by("approved").required && !by("note").required);
        assert_eq!(
            by("size").kind,
            Kind::Choice {
                values: vec![json!("s"), json!("l")],
                labels: vec!["Small".into(), "Large".into()],
                default: Some(1)
            }
        );
        assert_eq!(
            by("tier").kind,
            Kind::Choice {
                values: vec![json!("a"), json!("b")],
                labels: vec!["Gold".into(), "b".into()],
                default: None
            }
        );
        assert_eq!(
            by("tags").kind,
            Kind::Choices {
                values: vec![json!("x"), json!("y")],
                labels: vec!["x".into(), "y".into()],
                defaults: vec![false, true]
            }
        );
        assert_eq!(by("note").description.as_deref(), Some("why"));
    }

    #[test]
    fn answers_are_checked_against_the_schema() {
        let schema = json!({"type": "object", "properties": {
            "count": {"type": "integer", "minimum": 1, "maximum": 5},
            "ratio": {"type": "number"},
            "note": {"type": "string", "minLength": 2, "maxLength": 4}
        }, "required": ["count"]});
        let fields = fields(&schema);
        let by = |k: &str| fields.iter().find(|f| f.key == k).unwrap().clone();
        assert_eq!(by("count").parse("3"), Ok(Some(json!(3))));
        assert!(by("count").parse("3.5").is_err());
        assert!(by("count").parse("9").is_err());
        assert!(by("count").parse("").is_err(), "required");
        assert_eq!(by("ratio").parse("0.25"), Ok(Some(json!(0.25))));
        assert_eq!(by("ratio").parse(""), Ok(None), "optional and empty: left out");
        assert!(by("note").parse("x").is_err());
        assert!(by("note").parse("xxxxx").is_err());
        assert_eq!(by("note").parse("abc"), Ok(Some(json!("abc"))));
    }

    #[test]
    fn an_empty_enum_is_asked_by_its_type() {
        let schema =
            json!({"type": "object", "properties": {"pick": {"type": "string", "enum": []}}, "required": ["pick"]});
        assert!(matches!(fields(&schema)[0].kind, Kind::Text { .. }));
    }

    #[test]
    fn a_schema_without_properties_has_no_fields() {
        assert!(fields(&json!({"type": "object"})).is_empty());
        assert!(fields(&json!(null)).is_empty());
    }
}
