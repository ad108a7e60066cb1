//! The timed-reads drop-in under the real systemd. The shipped unit
//! leaves out what timing the application's reads needs (CAP_BPF,
//! CAP_PERFMON, bpf, perf_event_open): beside a reader the pacer steers on
//! the mean alone and says why once. With the drop-in the package
//! installs (`/usr/share/refreshd/timed-reads.conf`), put where its
//! comment says, the same refresh times the reader's reads at the drive
//! and `status` shows their p99. The container is granted what a host's
//! systemd has (nspawn's `--capability=`, `--system-call-filter=`), so the
//! unit and the drop-in are what decide.

use super::*;

const READER: &str = "refreshd-test-reader";

/// The drive shared with a reader: a 96 MiB stale file in `dir` refreshed
/// at 8 MiB/s while a process reads a fresh file on the same filesystem
/// with O_DIRECT, 4 KiB at a time. Returns the first reason `status`
/// gives for yielding that `done` accepts; the refresh is finished and
/// every file checked before it returns.
fn shared_refresh(
    c: &Container,
    t: &mut Tree,
    port: u16,
    dir: &str,
    done: impl Fn(&str) -> bool,
) -> String {
    let big = t.add_big(dir, 40 + dir.len() as u64);
    // The reader's file: fresh, and not one of the checked files (reads
    // move its access time).
    let fresh = t.fs.path(&format!("{dir}-reader"));
    write_file(&fresh, &pattern(16 * MIB, 41));
    t.fs.sync();
    set_config(c, port, "8MiB/s");
    c.ok("systemctl reload refreshd");
    // A reader whose dd fails stops (no spinning), and is collected.
    c.ok(&format!(
        "systemd-run --collect --unit={READER} sh -c 'while dd if=/srv/index/{dir}-reader \
         of=/dev/null bs=4k iflag=direct status=none; do :; done'"
    ));
    assert_eq!(
        c.ok(&format!("systemctl is-active {READER}")).trim(),
        "active"
    );
    c.ok(&format!("refreshctl now --force --path /srv/index/{dir}"));
    let mut seen = String::new();
    let mut started = false;
    c.wait_for("a reason to yield", 60, |c| {
        let d = drive(c);
        let reason = d["yielding"]["reason"].as_str().unwrap_or_default();
        // Once under way, a refresh that ends first ends the wait: its
        // reason is gone with it.
        started |= !d["refresh"].is_null();
        assert!(
            !started || !d["refresh"].is_null() || !seen.is_empty(),
            "the refresh ended before status gave an accepted reason"
        );
        if done(reason) {
            seen = reason.to_string();
        }
        !seen.is_empty()
    });
    c.ok(&format!("systemctl stop {READER}"));
    c.wait_for("the refresh done", 120, |c| drive(c)["refresh"].is_null());
    std::fs::remove_file(&fresh).unwrap();
    set_config(c, port, "400MiB/s");
    c.ok("systemctl reload refreshd");
    t.unchanged(&format!(
        "after refreshing {} beside a reader",
        big.display()
    ));
    seen
}

/// The journal of the unit's current run only.
fn this_run(c: &Container) -> String {
    let id = c.ok("systemctl show -p InvocationID --value refreshd");
    c.sh(&format!(
        "journalctl -b --no-pager -o cat _SYSTEMD_INVOCATION_ID={}",
        id.trim()
    ))
    .1
}

pub(super) fn reads_are_timed_with_the_drop_in_only(c: &Container, t: &mut Tree, port: u16) {
    let reason = shared_refresh(c, t, port, "untimed", |r| {
        r.contains("the application reads")
    });
    assert!(
        !reason.contains("p99"),
        "the shipped unit times nothing: {reason}"
    );
    let log = this_run(c);
    assert!(
        log.contains("are not timed one by one")
            && log.contains("CAP_BPF")
            && log.contains("which this process does not have"),
        "why it is not timed, said:\n{log}"
    );

    c.ok("install -D -m 644 /usr/share/refreshd/timed-reads.conf \
         /etc/systemd/system/refreshd.service.d/timed-reads.conf \
         && systemctl daemon-reload && systemctl restart refreshd");
    let reason = shared_refresh(c, t, port, "timed", |r| r.contains("p99 at the drive"));
    assert!(reason.contains("alone"), "{reason}");
    let log = this_run(c);
    assert!(
        !log.contains("not timed one by one"),
        "timed under the drop-in:\n{log}"
    );

    c.ok(
        "rm /etc/systemd/system/refreshd.service.d/timed-reads.conf \
         && systemctl daemon-reload && systemctl restart refreshd",
    );
}
