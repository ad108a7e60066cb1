//! `agingssd` commands. A drive runs in a `serve` process (started in the
//! background by `up`, or in the foreground) whose state lives in the
//! drive's directory: `state.json`, `control.sock`, `agingssd.log`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::control::{self, Request, Response, StopFlag};
use crate::disk::Stats;
use crate::drive::{self, Drive, DriveOptions};

/// What `up` leaves in `D/state.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UpState {
    pub pid: u32,
    pub loop_dev: String,
    pub mnt: PathBuf,
    pub fs: String,
    pub model: String,
    pub size: u64,
    pub channels: u32,
}

pub fn state_path(dir: &Path) -> PathBuf {
    dir.join("state.json")
}

fn read_state(dir: &Path) -> Option<UpState> {
    serde_json::from_str(&fs::read_to_string(state_path(dir)).ok()?).ok()
}

fn alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

/// Serves a drive in this process until `down`, SIGTERM or SIGINT.
pub fn serve(dir: &Path, opts: &DriveOptions) -> Result<()> {
    use nix::sys::signal::{SigSet, Signal};
    // Block the stop signals in every thread; one thread waits for them.
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set.thread_block()?;
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let dir = dir.canonicalize()?;
    let d = Drive::up(&dir, opts)?;
    let stop = Arc::new(StopFlag::default());
    control::serve(&dir, d.state.clone(), stop.clone())?;
    let s2 = stop.clone();
    std::thread::spawn(move || {
        let _ = set.wait();
        s2.stop();
    });
    let st = UpState {
        pid: std::process::id(),
        loop_dev: d.loop_dev.clone(),
        mnt: d.mnt.clone(),
        fs: opts.fs.clone(),
        model: opts.model.name.to_string(),
        size: opts.size,
        channels: opts.channels,
    };
    fs::write(state_path(&dir), serde_json::to_string_pretty(&st)?)?;
    println!(
        "loop device: {}\nmountpoint:  {}",
        st.loop_dev,
        st.mnt.display()
    );
    stop.wait();
    let result = d.down();
    let _ = fs::remove_file(control::socket_path(&dir));
    let _ = fs::remove_file(state_path(&dir));
    result
}

/// Starts `serve` in the background and waits until the drive is mounted.
pub fn up_background(dir: &Path, args: &[String]) -> Result<UpState> {
    drive::preflight()?;
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let dir = dir.canonicalize()?;
    if let Some(st) = read_state(&dir) {
        if alive(st.pid) {
            bail!(
                "a drive is already up in {} (pid {}); `agingssd down --dir {}` first",
                dir.display(),
                st.pid,
                dir.display()
            );
        }
        drive::cleanup_leftovers(&dir)?;
        let _ = fs::remove_file(state_path(&dir));
    }
    let log = fs::File::create(dir.join("agingssd.log"))?;
    let mut child = {
        use std::os::unix::process::CommandExt;
        Command::new(std::env::current_exe()?)
            .arg("serve")
            .arg("--dir")
            .arg(&dir)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // Own process group: a Ctrl-C in the shell that ran `up` does
            // not take the drive down.
            .process_group(0)
            .spawn()
            .context("starting the drive process")?
    };
    let t = Instant::now();
    loop {
        if let Some(st) = read_state(&dir) {
            if st.pid == child.id() {
                return Ok(st);
            }
        }
        if let Some(status) = child.try_wait()? {
            let log = fs::read_to_string(dir.join("agingssd.log")).unwrap_or_default();
            let _ = drive::cleanup_leftovers(&dir);
            bail!("the drive process exited ({status}):\n{}", log.trim());
        }
        if t.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            let _ = drive::cleanup_leftovers(&dir);
            bail!("the drive did not come up within 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Takes the drive down; idempotent, and also cleans up after a crash.
pub fn down(dir: &Path) -> Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    let st = read_state(dir);
    if st.as_ref().is_some_and(|s| alive(s.pid))
        && control::request(dir, &Request::Shutdown).is_ok()
    {
        let pid = st.as_ref().map_or(0, |s| s.pid);
        let t = Instant::now();
        while alive(pid) && t.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // Whatever is left: a killed process, a stuck one, a half-built drive.
    if let Some(s) = &st {
        if alive(s.pid) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(s.pid).unwrap_or(0)),
                nix::sys::signal::Signal::SIGKILL,
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    drive::cleanup_leftovers(dir)?;
    for f in [state_path(dir), control::socket_path(dir)] {
        let _ = fs::remove_file(f);
    }
    // Drives of older versions kept their flash in this file.
    let _ = fs::remove_file(dir.join("backing.img"));
    Ok(())
}

pub fn age(dir: &Path, months: f64) -> Result<()> {
    control::request(dir, &Request::Age { months }).map(|_| ())
}

/// Reads (or, with `write`, writes) of `[offset, offset+len)` fail with EIO.
pub fn fault(dir: &Path, offset: u64, len: u64, write: bool) -> Result<()> {
    let req = Request::Fault { offset, len, write };
    control::request(dir, &req).map(|_| ())
}

/// Turns write-path fade on (or off with `after_bytes` 0).
pub fn fade(dir: &Path, after_bytes: u64, factor: u64) -> Result<()> {
    control::request(
        dir,
        &Request::Fade {
            after_bytes,
            factor,
        },
    )
    .map(|_| ())
}

/// Caps the drive's link (0 lifts the cap).
pub fn link_cap(dir: &Path, bytes_per_sec: u64) -> Result<()> {
    control::request(dir, &Request::LinkCap { bytes_per_sec }).map(|_| ())
}

pub fn stats(dir: &Path) -> Result<Stats> {
    match control::request(dir, &Request::Stats)? {
        Response::Stats(s) => Ok(*s),
        other => bail!("unexpected answer {other:?}"),
    }
}
