//! The health gate: "can the cluster spare a copy now?", asked before a
//! slot is taken and between files. A command (exit 0: yes) or an
//! `http://` URL (2xx: yes), each within `health_timeout`. Anything else
//! — a non-zero exit, a signal, a timeout, a refused connection — is a
//! no, with the reason said.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::coordination::Coordination;
use crate::config::url::HttpUrl;

/// Why the gate said no (a failure to ask is a no).
#[derive(Debug, thiserror::Error)]
pub enum GateNo {
    #[error("health_command {prog}: {source}")]
    Spawn {
        prog: String,
        #[source]
        source: std::io::Error,
    },
    #[error("health_command {prog} did not answer within {timeout:?}")]
    CommandTimeout { prog: String, timeout: Duration },
    #[error("health_command {prog} {status}{stderr}")]
    Command {
        prog: String,
        status: std::process::ExitStatus,
        /// ": " and the end of what it printed, or nothing.
        stderr: String,
    },
    #[error("health_url {url}: {source}")]
    Http {
        url: HttpUrl,
        #[source]
        source: std::io::Error,
    },
    #[error("health_url {url}: no address")]
    NoAddress { url: HttpUrl },
    #[error("health_url {url} did not answer within {timeout:?}")]
    HttpTimeout { url: HttpUrl, timeout: Duration },
    #[error("health_url {url}: not an HTTP answer")]
    NotHttp { url: HttpUrl },
    #[error("health_url {url} answered {code}")]
    Status { url: HttpUrl, code: u16 },
}

/// Asks the configured gate; `Ok` when there is none or it says yes.
pub fn check(cfg: &Coordination) -> Result<(), GateNo> {
    match (&cfg.health_command, &cfg.health_url) {
        (Some(argv), _) => command(argv, cfg.health_timeout),
        (None, Some(url)) => http(url, cfg.health_timeout),
        (None, None) => Ok(()),
    }
}

fn command(argv: &[String], timeout: Duration) -> Result<(), GateNo> {
    use std::os::unix::process::CommandExt;
    let Some((prog, args)) = argv.split_first() else {
        return Ok(());
    };
    // Its own process group: a timeout kills what it started too (curl
    // under a shell), not only the shell.
    let mut child = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|source| GateNo::Spawn {
            prog: prog.clone(),
            source,
        })?;
    // Read on a thread: a process it left behind may keep the pipe open
    // long after it answered.
    let (tx, rx) = std::sync::mpsc::channel();
    if let Some(mut e) = child.stderr.take() {
        std::thread::spawn(move || {
            let mut err = String::new();
            let _ = e.read_to_string(&mut err);
            let _ = tx.send(err);
        });
    }
    let t = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if t.elapsed() >= timeout => {
                let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
                let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
                let _ = child.wait();
                return Err(GateNo::CommandTimeout {
                    prog: prog.clone(),
                    timeout,
                });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(source) => {
                return Err(GateNo::Spawn {
                    prog: prog.clone(),
                    source,
                })
            }
        }
    };
    if status.success() {
        return Ok(());
    }
    let err = rx
        .recv_timeout(Duration::from_millis(100))
        .unwrap_or_default();
    let err = err.trim();
    let err = if err.is_empty() {
        String::new()
    } else {
        format!(": {}", tail(err))
    };
    Err(GateNo::Command {
        prog: prog.clone(),
        status,
        stderr: err,
    })
}

/// The last 200 characters of a message.
fn tail(s: &str) -> &str {
    let start = s.len().saturating_sub(200);
    let start = (start..=s.len())
        .find(|i| s.is_char_boundary(*i))
        .unwrap_or(0);
    &s[start..]
}

fn http(u: &HttpUrl, timeout: Duration) -> Result<(), GateNo> {
    let io = |source| GateNo::Http {
        url: u.clone(),
        source,
    };
    let deadline = Instant::now() + timeout;
    let addr = (u.host.as_str(), u.port)
        .to_socket_addrs()
        .map_err(io)?
        .next()
        .ok_or_else(|| GateNo::NoAddress { url: u.clone() })?;
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(io)?;
    let left = || {
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    };
    let _ = s.set_write_timeout(Some(left()));
    // One write: a request sent in pieces may meet a server that reads
    // once.
    let request = format!(
        "GET {} HTTP/1.0\r\nHost: {}\r\nUser-Agent: refreshd\r\nConnection: close\r\n\r\n",
        u.path, u.host
    );
    s.write_all(request.as_bytes()).map_err(io)?;
    let mut head = [0u8; 64];
    let mut n = 0;
    while n < 12 {
        if Instant::now() >= deadline {
            return Err(GateNo::HttpTimeout {
                url: u.clone(),
                timeout,
            });
        }
        let _ = s.set_read_timeout(Some(left()));
        match s.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) => return Err(io(e)),
        }
    }
    let line = String::from_utf8_lossy(&head[..n]);
    let code = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| GateNo::NotHttp { url: u.clone() })?;
    if (200..300).contains(&code) {
        Ok(())
    } else {
        Err(GateNo::Status {
            url: u.clone(),
            code,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_command(argv: &[&str]) -> Coordination {
        Coordination {
            health_command: Some(argv.iter().map(|s| s.to_string()).collect()),
            health_timeout: Duration::from_millis(500),
            ..Coordination::default()
        }
    }

    #[test]
    fn a_command_says_yes_no_or_times_out() {
        assert!(check(&with_command(&["/bin/true"])).is_ok());
        let no = check(&with_command(&["/bin/sh", "-c", "echo yellow >&2; exit 3"]));
        assert!(
            no.as_ref()
                .is_err_and(|e| e.to_string().contains("exit status: 3")
                    && e.to_string().contains("yellow")),
            "{no:?}"
        );
        let slow = check(&with_command(&["/bin/sleep", "5"]));
        assert!(
            slow.as_ref()
                .is_err_and(|e| e.to_string().contains("did not answer")),
            "{slow:?}"
        );
        let missing = check(&with_command(&["/nonexistent/gate"]));
        assert!(missing.is_err());
        // What it leaves behind keeps its stderr open: the answer counts.
        let t = Instant::now();
        let left = check(&with_command(&["/bin/sh", "-c", "sleep 5 & exit 1"]));
        assert!(
            left.is_err() && t.elapsed() < Duration::from_secs(2),
            "{left:?} after {:?}",
            t.elapsed()
        );
        // A timeout kills what the command started too.
        let t = Instant::now();
        let slow = check(&with_command(&["/bin/sh", "-c", "sleep 5; true"]));
        assert!(
            slow.is_err() && t.elapsed() < Duration::from_secs(2),
            "{slow:?} after {:?}",
            t.elapsed()
        );
        assert!(check(&Coordination::default()).is_ok(), "no gate: yes");
    }

    #[test]
    fn a_url_says_yes_on_2xx_only() {
        use std::net::TcpListener;
        let serve = |status: &'static str| {
            let l = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
            let port = l.local_addr().map(|a| a.port()).unwrap_or(0);
            // Answers our request only: another test's probe of a port it
            // thought free may land here first.
            std::thread::spawn(move || {
                while let Ok((mut s, _)) = l.accept() {
                    let mut req = vec![];
                    let mut buf = [0u8; 1024];
                    while !req.ends_with(b"\r\n\r\n") {
                        match s.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => req.extend_from_slice(&buf[..n]),
                        }
                    }
                    if req.starts_with(b"GET /_cluster/health") {
                        let _ = write!(s, "HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
                        return;
                    }
                }
            });
            Coordination {
                health_url: HttpUrl::parse(&format!("http://127.0.0.1:{port}/_cluster/health"))
                    .ok(),
                health_timeout: Duration::from_secs(2),
                ..Coordination::default()
            }
        };
        assert!(check(&serve("200 OK")).is_ok());
        let no = check(&serve("503 Service Unavailable"));
        assert!(
            no.as_ref()
                .is_err_and(|e| e.to_string().contains("answered 503")),
            "{no:?}"
        );
        // Port 1 on loopback: nothing listens there.
        let refused = http(
            &HttpUrl::parse("http://127.0.0.1:1/").unwrap(),
            Duration::from_secs(1),
        );
        assert!(refused.is_err());
        assert!(HttpUrl::parse("https://x/").is_err());
        assert_eq!(
            HttpUrl::parse("http://es:9200/_cluster/health?wait_for_status=green"),
            Ok(HttpUrl {
                host: "es".into(),
                port: 9200,
                path: "/_cluster/health?wait_for_status=green".into()
            })
        );
    }
}
