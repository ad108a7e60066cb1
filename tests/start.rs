//! A start that fails leaves nothing behind: no control socket, no state
//! directory; and a running daemon is not disturbed by it.

use std::path::Path;

use crate::daemon_harness::*;
use crate::helpers::*;

/// `refreshd run` with `cfg`, expected to fail: its stderr.
fn failed_start(cfg: &Path) -> String {
    let out = refreshd()
        .args(["run", "--config"])
        .arg(cfg)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn config_at(path: &Path, state: &Path, socket: &Path, port: u16, tree: &Path) {
    std::fs::write(
        path,
        format!(
            "state_dir = \"{}\"\ncontrol_socket = \"{}\"\nmetrics_listen = \"127.0.0.1:{port}\"\n[[paths]]\npath = \"{}\"\n",
            state.display(),
            socket.display(),
            tree.display()
        ),
    )
    .unwrap();
}

#[test]
fn privileged_a_failed_start_leaves_nothing_behind() {
    if !privileged("privileged_a_failed_start_leaves_nothing_behind") {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let tree = tmp.path().join("tree");
    std::fs::create_dir(&tree).unwrap();

    // The metrics port is taken.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let (state, socket) = (
        tmp.path().join("a/state"),
        tmp.path().join("a/run/control.sock"),
    );
    let cfg = tmp.path().join("a.toml");
    config_at(&cfg, &state, &socket, port, &tree);
    let err = failed_start(&cfg);
    assert!(
        err.contains("metrics_listen") && err.contains("in use"),
        "{err}"
    );
    assert!(!socket.exists(), "no socket left: {err}");
    assert!(!state.exists(), "no state directory made: {err}");
    drop(taken);

    // Another daemon answers on the socket: the second start is refused
    // before it makes a state directory, and the first one serves on.
    let port = free_port();
    let running = config(tmp.path(), &tree, port, "");
    let daemon = Daemon::start(tmp.path(), &running, port);
    let other_state = tmp.path().join("b/state");
    let cfg = tmp.path().join("b.toml");
    config_at(&cfg, &other_state, &daemon.socket(), free_port(), &tree);
    let err = failed_start(&cfg);
    assert!(err.contains("in use by a running daemon"), "{err}");
    assert!(!other_state.exists(), "no state directory made: {err}");
    assert_eq!(
        daemon.ctl(&["status"]).0,
        0,
        "the running daemon still answers"
    );

    // Another daemon holds the state directory: the second one's socket
    // does not stay behind.
    let socket_c = tmp.path().join("c/control.sock");
    let cfg = tmp.path().join("c.toml");
    config_at(
        &cfg,
        &daemon.dir.join("state"),
        &socket_c,
        free_port(),
        &tree,
    );
    let err = failed_start(&cfg);
    assert!(err.contains("another refreshd is running"), "{err}");
    assert!(!socket_c.exists(), "no socket left: {err}");
    assert_eq!(daemon.ctl(&["status"]).0, 0);
}
