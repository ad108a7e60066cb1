//! `refreshctl`: talks to the daemon over its control socket and renders
//! the answers as tables (or passes the JSON through with `--json`).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::protocol::{Request, Response, Verb, VERSION};
use crate::units::format_size;

pub const DEFAULT_SOCKET: &str = "/run/refreshd/control.sock";

/// Why a command did not work.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("refreshd is not running: no control socket at {0} (start it with `systemctl start refreshd`, or pass --socket)")]
    NotRunning(PathBuf),
    #[error("refreshd is not running: {0} exists but nobody listens (stale socket)")]
    Stale(PathBuf),
    #[error("cannot access {0}: permission denied (root, or membership in the configured control_group, is needed)")]
    Denied(PathBuf),
    #[error("talking to refreshd at {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("refreshd: {0}")]
    Refused(String),
}

/// A connection to the daemon.
#[derive(Debug)]
pub struct Client {
    path: PathBuf,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Client {
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        let s = UnixStream::connect(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => ClientError::NotRunning(path.into()),
            std::io::ErrorKind::ConnectionRefused => ClientError::Stale(path.into()),
            std::io::ErrorKind::PermissionDenied => ClientError::Denied(path.into()),
            _ => ClientError::Io {
                path: path.into(),
                source: e,
            },
        })?;
        let io = |source| ClientError::Io {
            path: path.into(),
            source,
        };
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(io)?;
        let writer = s.try_clone().map_err(io)?;
        Ok(Client {
            path: path.into(),
            reader: BufReader::new(s),
            writer,
        })
    }

    /// Sends one request, returns the data of a successful response.
    pub fn call(&mut self, verb: Verb) -> Result<Value, ClientError> {
        let io = |source| ClientError::Io {
            path: self.path.clone(),
            source,
        };
        let mut line = Request { v: VERSION, verb }.encode();
        line.push('\n');
        self.writer.write_all(line.as_bytes()).map_err(io)?;
        let mut resp = String::new();
        self.reader.read_line(&mut resp).map_err(io)?;
        if resp.is_empty() {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the daemon closed the connection",
            )));
        }
        let r: Response = serde_json::from_str(&resp)
            .map_err(|e| io(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
        if r.ok {
            Ok(r.data.unwrap_or(Value::Null))
        } else {
            Err(ClientError::Refused(
                r.error.unwrap_or_else(|| "unknown error".into()),
            ))
        }
    }
}

fn mbps(v: &Value) -> String {
    v.as_f64()
        .map_or("-".into(), |b| format!("{:.0} MB/s", b / 1e6))
}

fn ago(t: &Value) -> String {
    let Some(t) = t.as_i64() else {
        return "never".into();
    };
    let d = crate::inventory::now_secs() - t;
    match d {
        i64::MIN..=59 => format!("{}s ago", d.max(0)),
        60..=3599 => format!("{}m ago", d / 60),
        3600..=86_399 => format!("{}h ago", d / 3600),
        _ => format!("{}d ago", d / 86_400),
    }
}

fn eta(s: &Value) -> String {
    s.as_f64().map_or("-".into(), |s| {
        let s = s as u64;
        if s >= 3600 {
            format!("{}h{:02}m", s / 3600, s % 3600 / 60)
        } else {
            format!("{}m{:02}s", s / 60, s % 60)
        }
    })
}

/// `status` as a table.
pub fn render_status(v: &Value) -> String {
    let mut out = format!(
        "{:<10} {:<15} {:>10} {:<28} {}\n",
        "DEVICE", "STATE", "STALE", "LAST SAMPLE", "REFRESH"
    );
    for d in v["drives"].as_array().into_iter().flatten() {
        let mut state = d["state"].as_str().unwrap_or("?").to_string();
        if let Some(w) = d["waiting"].as_str() {
            state.push_str(&format!(" ({w})"));
        } else if d["paused"].as_bool() == Some(true) {
            state.push_str(" paused");
        }
        let sample = match d["last_sample"].as_object() {
            Some(s) => format!(
                "{} {}",
                mbps(&s["stale_bps"]),
                s["ratio"]
                    .as_f64()
                    .map_or(format!("({})", ago(&s["at"])), |r| format!(
                        "= {r:.2}x fresh ({})",
                        ago(&s["at"])
                    ))
            ),
            None => "not yet".into(),
        };
        let refresh = match d["refresh"].as_object() {
            Some(p) => format!(
                "{}/{} files, {} of {}, ETA {}",
                p["files_done"],
                p["files_total"],
                format_size(p["bytes_done"].as_u64().unwrap_or(0)),
                format_size(p["bytes_total"].as_u64().unwrap_or(0)),
                eta(&p["eta_seconds"])
            ),
            None => format!("idle, last {}", ago(&d["last_refresh"])),
        };
        out.push_str(&format!(
            "{:<10} {:<15} {:>10} {:<28} {}\n",
            d["device"].as_str().unwrap_or("?"),
            state,
            format_size(d["stale_bytes"].as_u64().unwrap_or(0)),
            sample,
            refresh
        ));
        if let Some(e) = d["error"].as_str() {
            out.push_str(&format!("{:<10} note: {e}\n", ""));
        }
        if let Some(y) = d["yielding"].as_object() {
            out.push_str(&format!(
                "{:<10} yielding since {}: {}\n",
                "",
                ago(&y["since"]),
                y["reason"].as_str().unwrap_or("?")
            ));
        }
        if let Some(why) = d["last_sample"]["slow"].as_str() {
            out.push_str(&format!("{:<10} slow: {why}\n", ""));
            for f in d["diagnosis"].as_array().into_iter().flatten() {
                out.push_str(&format!("{:<10}   {}\n", "", f.as_str().unwrap_or("")));
            }
        }
        if let Some(why) = d["last_sample"]["unjudged"].as_str() {
            out.push_str(&format!("{:<10} cannot judge: {why}\n", ""));
        }
    }
    for u in v["unwatched"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "not watched: {}\n",
            u["reason"].as_str().unwrap_or("?")
        ));
    }
    if v["drives"].as_array().is_some_and(Vec::is_empty) {
        out.push_str("no configured tree can be watched: nothing is refreshed\n");
    }
    out
}

/// `drives` as a table.
pub fn render_drives(v: &Value) -> String {
    let mut out = String::new();
    for d in v.as_array().into_iter().flatten() {
        let members: Vec<String> = d["drives"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| {
                format!(
                    "{} ({}{})",
                    m["name"].as_str().unwrap_or("?"),
                    m["model"]
                        .as_str()
                        .map_or(String::new(), |s| format!("{s}, ")),
                    m["id"].as_str().unwrap_or("?")
                )
            })
            .collect();
        let paths: Vec<&str> = d["paths"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if let Some(why) = d["error"].as_str() {
            out.push_str(&format!("not watched: {}\n  {why}\n", paths.join(", ")));
            continue;
        }
        out.push_str(&format!(
            "{}: {}\n  paths: {}\n",
            d["device"].as_str().unwrap_or("?"),
            members.join(", "),
            paths.join(", ")
        ));
    }
    out
}

/// `plan` as a table.
pub fn render_plan(v: &Value) -> String {
    let mut out = String::new();
    for d in v.as_array().into_iter().flatten() {
        let p = &d["plan"];
        let files = p["files"].as_array().cloned().unwrap_or_default();
        out.push_str(&format!(
            "{}: {} files, {} (skipped as recently refreshed: {}, left for the daily budget: {})\n",
            d["device"].as_str().unwrap_or("?"),
            files.len(),
            format_size(p["bytes"].as_u64().unwrap_or(0)),
            p["skipped_recent"],
            p["deferred_budget"]
        ));
        for f in files.iter().take(20) {
            out.push_str(&format!(
                "  {:>10}  {:>6.0} days  {}\n",
                format_size(f["size"].as_u64().unwrap_or(0)),
                f["age_days"].as_f64().unwrap_or(0.0),
                f["path"].as_str().unwrap_or("?")
            ));
        }
        if files.len() > 20 {
            out.push_str(&format!(
                "  … and {} more (--json for all)\n",
                files.len() - 20
            ));
        }
    }
    out
}

/// `survey`: the latest sample per drive, as `refreshd survey` shows it.
pub fn render_survey(v: &Value) -> String {
    let mut out = String::new();
    for d in v.as_array().into_iter().flatten() {
        out.push_str(&format!(
            "{} ({})\n",
            d["device"].as_str().unwrap_or("?"),
            d["state"].as_str().unwrap_or("?")
        ));
        let Some(s) = d["sample"].as_object() else {
            out.push_str("  not sampled yet\n\n");
            continue;
        };
        out.push_str(&format!(
            "  {:<18} {:>7} {:>11} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8}\n",
            "data age (months)",
            "files",
            "bytes",
            "read MB/s",
            "p25 ms",
            "p50 ms",
            "p75 ms",
            "p95 ms",
            "mean ms"
        ));
        let row = |label: String, files: String, bytes: String, m: &Value| {
            let l = &m["latency_ms"];
            let f = |k: &str| l[k].as_f64().map_or("-".into(), |x| format!("{x:.2}"));
            format!(
                "  {label:<18} {files:>7} {bytes:>11} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8}\n",
                m["throughput"]["p50"]
                    .as_f64()
                    .map_or("-".into(), |b| format!("{:.1}", b / 1e6)),
                f("p25"),
                f("p50"),
                f("p75"),
                f("p95"),
                f("mean")
            )
        };
        let sample = &s["sample"];
        for b in sample["buckets"].as_array().into_iter().flatten() {
            let mut label = b["label"].as_str().unwrap_or("?").to_string();
            if b["stale"].as_bool() == Some(true) {
                label.push_str(" stale");
            }
            out.push_str(&row(
                label,
                b["files"].to_string(),
                format_size(b["bytes"].as_u64().unwrap_or(0)),
                &b["measured"],
            ));
        }
        if sample["fresh"].is_object() {
            out.push_str(&row(
                "fresh reference".into(),
                "canary".into(),
                format_size(sample["canary_bytes"].as_u64().unwrap_or(0)),
                &sample["fresh"],
            ));
        }
        let j = &s["judgement"];
        let reasons: Vec<&str> = j["reasons"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        out.push_str(&format!(
            "  sampled {}: stale {}{}{}\n\n",
            ago(&s["at"]),
            mbps(&j["stale_bps"]),
            j["ratio"]
                .as_f64()
                .map_or(String::new(), |r| format!(" = {r:.2}x fresh")),
            if reasons.is_empty() {
                String::new()
            } else {
                format!(" ({})", reasons.join("; "))
            }
        ));
    }
    out
}

/// After `now --wait`: what each request did, then the status table.
pub fn render_now_done(requested: &Value, st: &Value) -> String {
    let mut out = String::new();
    for r in requested.as_array().into_iter().flatten() {
        let dev = r["device"].as_str().unwrap_or("?");
        let d = st["drives"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|d| d["device"] == dev);
        if let Some(what) = d.and_then(|d| d["last_request"].as_str()) {
            out.push_str(&format!("{dev}: {what}\n"));
        }
    }
    out.push_str(&render_status(st));
    out
}

/// `now --wait`: follows the drives' progress until the requests are done.
pub fn wait(client: &mut Client, requested: &Value, show_bar: bool) -> Result<Value, ClientError> {
    let targets: Vec<(String, u64)> = requested
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| Some((r["device"].as_str()?.to_string(), r["request"].as_u64()?)))
        .collect();
    let bar = show_bar.then(|| {
        let pb = indicatif::ProgressBar::new(0);
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        pb
    });
    loop {
        let st = client.call(Verb::Status {})?;
        let drives = st["drives"].as_array().cloned().unwrap_or_default();
        let mut all_done = true;
        for (dev, req) in &targets {
            let Some(d) = drives.iter().find(|d| d["device"] == dev.as_str()) else {
                continue;
            };
            if d["completed"].as_u64().unwrap_or(0) < *req {
                all_done = false;
            }
            if let (Some(pb), Some(p)) = (&bar, d["refresh"].as_object()) {
                pb.set_length(p["bytes_total"].as_u64().unwrap_or(0));
                pb.set_position(p["bytes_done"].as_u64().unwrap_or(0));
                pb.set_message(format!(
                    "{dev} {}/{} files",
                    p["files_done"], p["files_total"]
                ));
            }
        }
        if all_done {
            if let Some(pb) = bar {
                pb.finish_and_clear();
            }
            return Ok(st);
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}
