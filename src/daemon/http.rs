//! The `/metrics` endpoint: a small HTTP/1.x responder with the bounds a
//! port any local user can reach needs — at most [`MAX_CONNECTIONS`] at
//! once (beyond, closed at once), and a request must arrive whole within
//! [`REQUEST_TIMEOUT`] (then the connection is closed). One request per
//! connection (`Connection: close`), which Prometheus handles.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Renders the metrics (OpenMetrics text) at each scrape.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// Scrapes served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// The request head must arrive within this.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest request head read.
const MAX_HEAD: usize = 8192;

pub async fn serve(listener: TcpListener, render: Render) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    drop(stream); // over the cap: closed at once
                    continue;
                };
                let s = render.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(REQUEST_TIMEOUT * 2, one(stream, &s)).await;
                    drop(permit);
                });
            }
            Err(e) => {
                tracing::warn!("metrics accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// OpenMetrics as the classic text format (0.0.4): counters' HELP and
/// TYPE name the `_total` series, no UNIT or EOF lines, and the sampled
/// latency quantiles are a summary (their type there).
pub fn text_format(openmetrics: &str) -> String {
    let mut counters = std::collections::HashSet::new();
    for l in openmetrics.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            if let Some(name) = rest.strip_suffix(" counter") {
                counters.insert(name.to_string());
            }
        }
    }
    let mut out = String::with_capacity(openmetrics.len());
    for l in openmetrics.lines() {
        if l == "# EOF" || l.starts_with("# UNIT ") {
            continue;
        }
        let line = match l
            .strip_prefix("# HELP ")
            .or_else(|| l.strip_prefix("# TYPE "))
        {
            Some(rest) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let kind = &l[..7];
                if counters.contains(name) {
                    format!("{kind}{name}_total {tail}")
                } else if kind == "# TYPE " && tail == "gauge" && name.ends_with("_latency_seconds")
                {
                    format!("{kind}{name} summary")
                } else {
                    l.to_string()
                }
            }
            None => l.to_string(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// Reads one request head and answers it.
async fn one(mut stream: TcpStream, render: &Render) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let got = tokio::time::timeout(REQUEST_TIMEOUT, async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
            let n = stream.read(&mut buf).await?;
            if n == 0 || head.len() + n > MAX_HEAD {
                return Ok::<bool, std::io::Error>(false);
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok(true)
    })
    .await;
    if !matches!(got, Ok(Ok(true))) {
        return Ok(()); // slow, truncated or too long: closed
    }
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let openmetrics = String::from_utf8_lossy(&head)
        .lines()
        .any(|l| l.to_ascii_lowercase().starts_with("accept:") && l.contains("openmetrics"));
    let (status, ctype, body) = match (method, path) {
        // Prometheus asks for OpenMetrics; anything else (curl, promtool)
        // gets the classic text format.
        ("GET" | "HEAD", "/metrics") if openmetrics => (
            "200 OK",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            render(),
        ),
        ("GET" | "HEAD", "/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            text_format(&render()),
        ),
        ("GET" | "HEAD", _) => ("404 Not Found", "text/plain", "see /metrics\n".into()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET /metrics\n".into(),
        ),
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if method != "HEAD" {
        out.extend_from_slice(body.as_bytes());
    }
    stream.write_all(&out).await?;
    stream.shutdown().await
}
