//! What `refreshctl` asks: one JSON object per line, with `"v"`.

use serde::{Deserialize, Serialize};

pub const VERSION: u32 = 1;
/// Where the daemon listens unless `control_socket` says otherwise.
pub const DEFAULT_SOCKET: &str = "/run/refreshd/control.sock";
/// Longest request line the daemon reads.
pub const MAX_LINE: usize = 64 * 1024;

/// A request: the verb's fields plus `"v"`.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub v: u32,
    pub verb: Verb,
}

impl Request {
    /// The request as one line (without the newline).
    pub fn encode(&self) -> String {
        let mut v = serde_json::to_value(&self.verb).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.insert("v".into(), self.v.into());
        }
        v.to_string()
    }
}

/// What is asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verb", rename_all = "snake_case", deny_unknown_fields)]
pub enum Verb {
    Status {},
    Drives {},
    Plan {},
    Survey {},
    /// Sample now and refresh if degraded (or always, with `force`).
    Now {
        #[serde(default)]
        drive: Option<String>,
        #[serde(default)]
        path: Option<String>,
        #[serde(default)]
        force: bool,
    },
    Pause {
        #[serde(default)]
        drive: Option<String>,
    },
    Resume {
        #[serde(default)]
        drive: Option<String>,
    },
}

impl Verb {
    pub fn name(&self) -> &'static str {
        match self {
            Verb::Status {} => "status",
            Verb::Drives {} => "drives",
            Verb::Plan {} => "plan",
            Verb::Survey {} => "survey",
            Verb::Now { .. } => "now",
            Verb::Pause { .. } => "pause",
            Verb::Resume { .. } => "resume",
        }
    }

    /// Verbs that change nothing (allowed to the configured group).
    pub fn read_only(&self) -> bool {
        matches!(
            self,
            Verb::Status {} | Verb::Drives {} | Verb::Plan {} | Verb::Survey {}
        )
    }
}

/// Why a request line is refused (the message is sent back).
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("bad request: not JSON ({0})")]
    NotJson(#[source] serde_json::Error),
    #[error("bad request: not a JSON object")]
    NotObject,
    #[error("bad request: missing protocol version \"v\"")]
    NoVersion,
    #[error("protocol version {0} is not supported (this daemon speaks {VERSION})")]
    Version(u64),
    #[error("bad request: {0}")]
    Verb(#[source] serde_json::Error),
}

/// Parses one request line.
pub fn parse_request(line: &str) -> Result<Request, RequestError> {
    let mut v: serde_json::Value = serde_json::from_str(line).map_err(RequestError::NotJson)?;
    let obj = v.as_object_mut().ok_or(RequestError::NotObject)?;
    match obj.remove("v").as_ref().and_then(serde_json::Value::as_u64) {
        Some(n) if n == u64::from(VERSION) => {}
        Some(n) => return Err(RequestError::Version(n)),
        None => return Err(RequestError::NoVersion),
    }
    let verb = serde_json::from_value(v).map_err(RequestError::Verb)?;
    Ok(Request { v: VERSION, verb })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_bad_ones_are_explained() {
        let r = Request {
            v: 1,
            verb: Verb::Now {
                drive: Some("sda".into()),
                path: None,
                force: true,
            },
        };
        assert_eq!(parse_request(&r.encode()).ok(), Some(r));
        assert_eq!(
            parse_request(r#"{"v":1,"verb":"status"}"#)
                .map(|r| r.verb)
                .ok(),
            Some(Verb::Status {})
        );
        for (bad, says) in [
            ("garbage", "not JSON"),
            (r#"{"verb":"status"}"#, "missing protocol version"),
            (r#"{"v":2,"verb":"status"}"#, "version 2"),
            (r#"{"v":1,"verb":"explode"}"#, "unknown variant"),
            (r#"{"v":1,"verb":"status","extra":1}"#, "unknown field"),
            (r#"{"v":1,"verb":"now","force":"yes"}"#, "invalid type"),
        ] {
            let e = parse_request(bad).expect_err(bad).to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
