//! What the daemon answers: one JSON object per line, with `"v"`.

use serde::{Deserialize, Serialize};

use crate::request::VERSION;

/// A response: `ok` with `data`, or an `error` in words.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub v: u32,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Response {
    pub fn ok(data: serde_json::Value) -> Response {
        Response {
            v: VERSION,
            ok: true,
            data: Some(data),
            error: None,
        }
    }

    pub fn err(msg: impl Into<String>) -> Response {
        Response {
            v: VERSION,
            ok: false,
            data: None,
            error: Some(msg.into()),
        }
    }
}
