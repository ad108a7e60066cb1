//! What a session's failure says: etcd's errors without the transport's
//! noise, timeouts, and a group whose `max_concurrent` etcd disagrees with.

use std::path::PathBuf;
use std::time::Duration;

/// Why a session could not be had or was lost.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// What etcd (or the transport) said, without its noise.
    #[error("{0}")]
    Etcd(String),
    #[error("etcd did not answer within {0:?}")]
    Timeout(Duration),
    #[error("connecting timed out")]
    ConnectTimeout,
    #[error("reading {what} {}: {source}", .path.display())]
    File {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("no keep-alive answer in time")]
    KeepAliveTimeout,
    #[error("the keep-alive stream ended")]
    KeepAliveEnded,
    #[error("the lease expired")]
    LeaseExpired,
    /// Every endpoint failed: each one's reason.
    #[error("{}", .0.iter().map(|(e, why)| format!("{e}: {why}")).collect::<Vec<_>>().join("; "))]
    Endpoints(Vec<(String, SessionError)>),
    /// TLS without a client certificate was refused, maybe for wanting one.
    #[error("{0} (if etcd runs with --client-cert-auth, set cert_file and key_file)")]
    ClientCertificate(Box<SessionError>),
    #[error("starting a runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("etcd ({endpoints}): {source}")]
    Unreachable {
        endpoints: String,
        #[source]
        source: Box<SessionError>,
    },
    #[error("etcd: reading {prefix}: {source}")]
    Read {
        prefix: String,
        #[source]
        source: Box<SessionError>,
    },
    #[error("leaving")]
    Leaving,
}

/// Whether the group's members agree on `max_concurrent`.
#[derive(Debug)]
pub(super) enum Agreement {
    Agrees,
    /// It does not: etcd has `theirs` under `key`.
    Disagrees {
        group: String,
        key: String,
        theirs: Option<String>,
        ours: String,
    },
}

impl std::fmt::Display for Agreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Agreement::Agrees => f.write_str("the group agrees"),
            Agreement::Disagrees { group, key, theirs, ours } => write!(
                f,
                "group {group} has max_concurrent = {} in etcd ({key}) but this daemon is configured with {ours}: every member of a group must agree; not refreshing in it (fix the config, or set the key: etcdctl put {key} N)",
                theirs.as_deref().unwrap_or("?")
            ),
        }
    }
}

/// The message of an etcd error, without the transport's noise.
pub(super) fn describe(e: &etcd_client::Error) -> String {
    match e {
        etcd_client::Error::GRpcStatus(s) => {
            let msg = s.message();
            if msg.contains("authentication failed") || msg.contains("invalid user") {
                format!("authentication failed (user or password wrong): {msg}")
            } else {
                msg.to_string()
            }
        }
        other => {
            // The transport's own message is often generic ("operation was
            // canceled"); the cause (a TLS alert, a refused connection) is
            // further down.
            let mut msg = other.to_string();
            let mut cause = std::error::Error::source(other);
            while let Some(c) = cause {
                let m = c.to_string();
                if !msg.contains(&m) {
                    msg = format!("{msg}: {m}");
                }
                cause = c.source();
            }
            msg
        }
    }
}

pub(super) async fn with_timeout<T>(
    d: Duration,
    f: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, SessionError> {
    match tokio::time::timeout(d, f).await {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(e)) => Err(SessionError::Etcd(describe(&e))),
        Err(_) => Err(SessionError::Timeout(d)),
    }
}
