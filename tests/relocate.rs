//! Relocation of files other processes have open, on ext4 (MOVE_EXT), XFS
//! and btrfs (FIDEDUPERANGE): a live mmap reader never sees wrong bytes,
//! concurrent writers (write()+fsync, shared writable mmap) lose no update,
//! a concurrent truncate wins, holes/unwritten/shared extents stay as they
//! are, a nearly full filesystem is left alone, and on the aged testbed the
//! in-use file reads at fresh speed afterwards.

mod space;

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::helpers::*;
use refreshd::config::Strategy;
use refreshd::engine::{Engine, EngineConfig, Target, UnsafeSwitches};
use refreshd::io::syscalls::{self, FIEMAP_EXTENT_SHARED, FIEMAP_EXTENT_UNWRITTEN};
use testbed::{Drive, DriveOptions};

const FS: [&str; 3] = ["ext4j", "xfs", "btrfs"];
const MIB: usize = 1 << 20;

fn physical(path: &Path) -> Vec<(u64, u64)> {
    let f = File::open(path).unwrap();
    syscalls::fiemap(std::os::fd::AsFd::as_fd(&f))
        .unwrap()
        .iter()
        .map(|e| (e.logical, e.physical))
        .collect()
}

/// A shared mapping of a whole file, unmapped on drop.
struct Map {
    ptr: *mut u8,
    len: usize,
    _file: File,
}

// SAFETY: the mapping is plain memory shared with the kernel's page cache;
// threads only read or write bytes through raw pointers.
unsafe impl Send for Map {}

impl Map {
    fn new(path: &Path, writable: bool) -> Map {
        let file = File::options()
            .read(true)
            .write(writable)
            .open(path)
            .unwrap();
        let len = file.metadata().unwrap().len() as usize;
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a fresh shared mapping of an open file, length from fstat.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        Map {
            ptr: ptr.cast(),
            len,
            _file: file,
        }
    }

    fn read(&self, off: usize, out: &mut [u8]) {
        assert!(off + out.len() <= self.len);
        for (i, b) in out.iter_mut().enumerate() {
            // SAFETY: in bounds of the mapping; volatile so every pass
            // really reads the pages.
            *b = unsafe { std::ptr::read_volatile(self.ptr.add(off + i)) };
        }
    }

    fn write(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.len);
        // SAFETY: in bounds of a writable shared mapping.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(off), data.len()) };
        // SAFETY: msync of the mapping made in new().
        let rc = unsafe { libc::msync(self.ptr.cast(), self.len, libc::MS_SYNC) };
        assert_eq!(rc, 0);
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what new() mapped.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Keeps `path` open and mmapped read-only and compares every page with
/// `expect` until `stop`; returns (passes, wrong pages).
fn mmap_reader(
    path: &Path,
    expect: Arc<Vec<u8>>,
    stop: Arc<AtomicBool>,
    done: Arc<std::sync::atomic::AtomicU64>,
) -> thread::JoinHandle<(u64, u64)> {
    let map = Map::new(path, false);
    thread::spawn(move || {
        let mut page = vec![0u8; 4096];
        let (mut passes, mut wrong) = (0, 0);
        while !stop.load(Ordering::Relaxed) || passes == 0 {
            for off in (0..map.len).step_by(4096) {
                let n = (map.len - off).min(4096);
                map.read(off, &mut page[..n]);
                if page[..n] != expect[off..off + n] {
                    wrong += 1;
                }
            }
            passes += 1;
            done.store(passes, Ordering::Relaxed);
        }
        (passes, wrong)
    })
}

/// Waits until the reader has made `n` passes over the map.
fn wait_for_passes(done: &std::sync::atomic::AtomicU64, n: u64, when: &str) {
    let t = std::time::Instant::now();
    while done.load(Ordering::Relaxed) < n {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(120),
            "the reader made no pass {when} in 120 s"
        );
        thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn privileged_relocation_refreshes_a_file_mmapped_by_a_live_reader() {
    if !privileged("privileged_relocation_refreshes_a_file_mmapped_by_a_live_reader") {
        return;
    }
    for kind in FS {
        let fs = LoopFs::new(kind, 320);
        let p = fs.path("index.seg");
        let data = Arc::new(pattern(24 * MIB + 777, 5));
        write_file(&p, &data);
        fs.sync();
        let phys = physical(&p);
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::default();
        let reader = mmap_reader(&p, data.clone(), stop.clone(), Arc::clone(&done));
        // Live before the refresh, and still reading after it: a pass
        // before, and the pass in progress at its end finished.
        wait_for_passes(&done, 1, "before the refresh");
        // After the reader's mmap, which set the atime (its access is the
        // application's: refreshd keeps it).
        let before = fingerprint(&p);
        // auto: the reader has it open, so no lease: relocation.
        let (code, files, _) =
            refresh_json(&["--rate", "24MiB/s", "--relocate-chunk", "2MiB"], &[&p]);
        let at_end = done.load(Ordering::Relaxed);
        wait_for_passes(&done, at_end + 1, "across the end of the refresh");
        stop.store(true, Ordering::Relaxed);
        let (passes, wrong) = reader.join().unwrap();
        let r = &files[0];
        assert_eq!(code, 0, "{kind}: {r}");
        assert_eq!(r["status"], "refreshed", "{kind}: {r}");
        assert_eq!(r["strategy"], "relocate", "{kind}: {r}");
        assert_eq!(r["bytes_refreshed"], data.len() as u64, "{kind}: {r}");
        assert_eq!(wrong, 0, "{kind}: the reader saw wrong bytes");
        assert!(passes >= 2, "{kind}: {passes} passes");
        drop_caches();
        assert_eq!(fingerprint(&p), before, "{kind}: content, layout and times");
        let after = physical(&p);
        assert!(
            after.iter().all(|e| !phys.contains(e)),
            "{kind}: the data did not move: {phys:?} -> {after:?}"
        );
    }
}

#[test]
fn privileged_relocation_loses_no_concurrent_write() {
    if !privileged("privileged_relocation_loses_no_concurrent_write") {
        return;
    }
    for kind in FS {
        let fs = LoopFs::new(kind, 320);
        let p = fs.path("live.db");
        let len = 24 * MIB;
        let mut data = pattern(len, 9);
        write_file(&p, &data);
        fs.sync();
        let stop = Arc::new(AtomicBool::new(false));
        // Writer 1: open, write a stamp, fsync, close — over and over.
        let w1 = {
            let (p, stop) = (p.clone(), stop.clone());
            thread::spawn(move || {
                let mut last = vec![None; 24];
                let mut i: u64 = 1;
                while !stop.load(Ordering::Relaxed) {
                    let slot = (i % 24) as usize;
                    let f = File::options().write(true).open(&p).unwrap();
                    f.write_all_at(&i.to_le_bytes(), (slot * MIB + 100) as u64)
                        .unwrap();
                    f.sync_all().unwrap();
                    drop(f);
                    last[slot] = Some(i);
                    i += 1;
                    thread::sleep(Duration::from_millis(3));
                }
                last
            })
        };
        // Writer 2: a shared writable mapping, msync after each stamp.
        let w2 = {
            let (map, stop) = (Map::new(&p, true), stop.clone());
            thread::spawn(move || {
                let mut last = vec![None; 24];
                let mut i: u64 = 1;
                while !stop.load(Ordering::Relaxed) {
                    let slot = (i % 24) as usize;
                    map.write(slot * MIB + 5000, &i.to_le_bytes());
                    last[slot] = Some(i);
                    i += 1;
                    thread::sleep(Duration::from_millis(2));
                }
                last
            })
        };
        let (code, files, _) = refresh_json(
            &[
                "--strategy",
                "relocate",
                "--rate",
                "16MiB/s",
                "--relocate-chunk",
                "1MiB",
            ],
            &[&p],
        );
        stop.store(true, Ordering::Relaxed);
        let (l1, l2) = (w1.join().unwrap(), w2.join().unwrap());
        let r = &files[0];
        assert_eq!(code, 0, "{kind}: {r}");
        assert_eq!(r["strategy"], "relocate", "{kind}: {r}");
        assert!(r["bytes_refreshed"].as_u64().unwrap() > 0, "{kind}: {r}");
        for (last, at) in [(&l1, 100), (&l2, 5000)] {
            for (slot, v) in last.iter().enumerate() {
                if let Some(v) = v {
                    let o = slot * MIB + at;
                    data[o..o + 8].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        assert!(l1.iter().flatten().count() > 10 && l2.iter().flatten().count() > 10);
        drop_caches();
        let now = std::fs::read(&p).unwrap();
        assert_eq!(now.len(), data.len());
        let bad = (0..len)
            .step_by(8)
            .find(|&i| now[i..i + 8] != data[i..i + 8]);
        assert_eq!(
            bad, None,
            "{kind}: a write was lost or the data changed at {bad:?}"
        );
    }
}

#[test]
fn privileged_relocation_yields_to_a_concurrent_truncate() {
    if !privileged("privileged_relocation_yields_to_a_concurrent_truncate") {
        return;
    }
    for kind in FS {
        let fs = LoopFs::new(kind, 320);
        let p = fs.path("shrinks");
        let data = pattern(32 * MIB, 3);
        write_file(&p, &data);
        fs.sync();
        let keep = 12 * MIB + 1000;
        let t = {
            let p = p.clone();
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(700));
                File::options()
                    .write(true)
                    .open(&p)
                    .unwrap()
                    .set_len(keep as u64)
                    .unwrap();
            })
        };
        let (_, files, _) = refresh_json(
            &[
                "--strategy",
                "relocate",
                "--rate",
                "16MiB/s",
                "--relocate-chunk",
                "1MiB",
            ],
            &[&p],
        );
        t.join().unwrap();
        let r = &files[0];
        assert_eq!(r["status"], "interrupted", "{kind}: {r}");
        assert!(
            r["reason"].as_str().unwrap().contains("truncated"),
            "{kind}: {r}"
        );
        drop_caches();
        let now = std::fs::read(&p).unwrap();
        assert_eq!(now.len(), keep, "{kind}");
        assert!(now == data[..keep], "{kind}: content of the truncated file");
    }
}

#[test]
fn privileged_relocation_keeps_holes_unwritten_and_shared_extents() {
    if !privileged("privileged_relocation_keeps_holes_unwritten_and_shared_extents") {
        return;
    }
    for kind in FS {
        let fs = LoopFs::new(kind, 320);
        let p = fs.path("sparse");
        let f = File::create(&p).unwrap();
        let a = pattern(MIB, 1);
        let b = pattern(MIB + 123, 2);
        f.write_all_at(&a, 0).unwrap();
        f.write_all_at(&a, 3 * MIB as u64).unwrap();
        f.write_all_at(&b, 8 * MIB as u64).unwrap();
        // Preallocated, never written: must stay unwritten.
        rustix::fs::fallocate(
            &f,
            rustix::fs::FallocateFlags::empty(),
            5 * MIB as u64,
            2 * MIB as u64,
        )
        .unwrap();
        drop(f);
        fs.sync();
        let before = fingerprint(&p);
        let unwritten = fiemap_bytes(&p, FIEMAP_EXTENT_UNWRITTEN);
        assert!(unwritten > 0, "{kind}: setup");
        let (code, files, _) = refresh_json(&["--strategy", "relocate"], &[&p]);
        let r = &files[0];
        assert_eq!(
            (code, r["status"].as_str()),
            (0, Some("refreshed")),
            "{kind}: {r}"
        );
        assert_eq!(
            r["bytes_refreshed"],
            (2 * MIB + MIB + 123) as u64,
            "{kind}: {r}"
        );
        drop_caches();
        assert_eq!(fingerprint(&p), before, "{kind}: holes, data, size, times");
        assert_eq!(
            fiemap_bytes(&p, FIEMAP_EXTENT_UNWRITTEN),
            unwritten,
            "{kind}"
        );

        if kind == "ext4j" {
            continue; // no reflinks on ext4
        }
        let q = fs.path("clone");
        let out = run(std::process::Command::new("cp")
            .arg("--reflink=always")
            .arg(&p)
            .arg(&q));
        assert!(out.status.success());
        fs.sync();
        let shared = fiemap_bytes(&q, FIEMAP_EXTENT_SHARED);
        let (_, files, _) = refresh_json(&["--strategy", "relocate"], &[&q]);
        let r = &files[0];
        // Skipped: shared (or shared plus the preallocated range).
        assert_eq!(r["status"], "skipped", "{kind}: {r}");
        assert_eq!(
            r["excluded"]["shared"],
            (2 * MIB + MIB + 123) as u64,
            "{kind}: {r}"
        );
        assert_eq!(r["bytes_refreshed"], 0, "{kind}: {r}");
        assert_eq!(
            fiemap_bytes(&q, FIEMAP_EXTENT_SHARED),
            shared,
            "{kind}: still shared"
        );
    }
}
