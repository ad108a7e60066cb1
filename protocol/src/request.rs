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

/// Parses one request line, with an error fit to send back.
pub fn parse_request(line: &str) -> Result<Request, String> {
    let mut v: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("bad request: not JSON ({e})"))?;
    let obj = v
        .as_object_mut()
        .ok_or_else(|| "bad request: not a JSON object".to_string())?;
    match obj.remove("v").as_ref().and_then(serde_json::Value::as_u64) {
        Some(n) if n == u64::from(VERSION) => {}
        Some(n) => {
            return Err(format!(
                "protocol version {n} is not supported (this daemon speaks {VERSION})"
            ))
        }
        None => return Err("bad request: missing protocol version \"v\"".into()),
    }
    let verb = serde_json::from_value(v).map_err(|e| format!("bad request: {e}"))?;
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
        assert_eq!(parse_request(&r.encode()), Ok(r));
        assert_eq!(
            parse_request(r#"{"v":1,"verb":"status"}"#).map(|r| r.verb),
            Ok(Verb::Status {})
        );
        for (bad, says) in [
            ("garbage", "not JSON"),
            (r#"{"verb":"status"}"#, "missing protocol version"),
            (r#"{"v":2,"verb":"status"}"#, "version 2"),
            (r#"{"v":1,"verb":"explode"}"#, "unknown variant"),
            (r#"{"v":1,"verb":"status","extra":1}"#, "unknown field"),
            (r#"{"v":1,"verb":"now","force":"yes"}"#, "invalid type"),
        ] {
            let e = parse_request(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
