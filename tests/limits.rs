//! Local abuse cannot lock the operator out: 2,000 idle connections on the
//! control socket (from a `control_group` member) and on `/metrics` (from
//! any local user), and as many from root itself, and root's `refreshctl
//! status` still answers within a second. Regression: 1,100 idle
//! connections made `status` time out and `pause` hang ("Too many open
//! files") until they closed.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::daemon_harness::*;
use crate::helpers::*;

/// Opens `n` connections to the control socket and `n` to the metrics
/// port as `nobody` (a member of `nogroup`, the configured control
/// group), says how many it holds, and keeps them until killed.
const HOLDER: &str = r#"
import socket, sys, time
path, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
held = []
for _ in range(n):
    for fam, addr in ((socket.AF_UNIX, path), (socket.AF_INET, ("127.0.0.1", port))):
        s = socket.socket(fam, socket.SOCK_STREAM)
        try:
            s.connect(addr)
            held.append(s)
        except OSError:
            s.close()
print("holding", len(held), flush=True)
time.sleep(600)
"#;

struct Kill(std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn status_time(d: &Daemon) -> Duration {
    let t = Instant::now();
    let (code, out, err) = d.ctl(&["status"]);
    assert_eq!(code, 0, "{out}{err}");
    t.elapsed()
}

#[test]
fn privileged_idle_connections_do_not_lock_root_out() {
    if !privileged("privileged_idle_connections_do_not_lock_root_out") {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let fs = LoopFs::new("ext4", 256);
    let tree = fs.path("tree");
    stale_files(&tree, 1, 1, 701);
    let port = free_port();
    let cfg = config(tmp.path(), &tree, port, "");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, format!("control_group = \"nogroup\"\n{text}")).unwrap();
    // 4,096 descriptors (systemd's default soft limit is 1,024; the unit
    // sets 65,536): 4,000 connections held open would exhaust them.
    let d = Daemon::start_with_file_limit(tmp.path(), &cfg, port, 4096);
    // A group member (and any local user, on /metrics) holds 2,000 each.
    let mut holder = Kill(
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .args(["/usr/bin/python3", "-c", HOLDER])
            .arg(d.socket())
            .arg(port.to_string())
            .arg("2000")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.0.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.starts_with("holding"), "{line}");
    for _ in 0..3 {
        let took = status_time(&d);
        assert!(took < Duration::from_secs(1), "status took {took:?}");
    }
    // Root itself, 2,000 idle connections: its own next request answers.
    let mine: Vec<std::os::unix::net::UnixStream> = (0..2000)
        .map(|_| std::os::unix::net::UnixStream::connect(d.socket()).unwrap())
        .collect();
    let took = status_time(&d);
    assert!(took < Duration::from_secs(1), "status took {took:?}");
    let (code, _, err) = d.ctl(&["pause"]);
    assert_eq!(code, 0, "{err}");
    d.ctl(&["resume"]);
    drop(mine);
    // /metrics: the idle ones are closed after the request timeout, and a
    // scrape gets through.
    let t = Instant::now();
    loop {
        let m = std::panic::catch_unwind(|| http_get(port, "/metrics")).unwrap_or_default();
        if m.contains("refreshd_build_info") {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "no scrape got through"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The group member's surplus connections were turned away, counted.
    let m = http_get(port, "/metrics");
    let turned = metric(
        &m,
        "refreshd_control_requests_total{verb=\"connect\",result=\"too_many\"}",
    )
    .unwrap_or(0.0);
    assert!(turned >= 1000.0, "{turned}\n{m}");
    drop(holder);
}
