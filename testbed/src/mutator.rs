//! A file exerciser in the spirit of xfstests' fsx, for tests that run
//! refreshd against files other processes are changing: random writes,
//! truncates (shrinking and growing), hole punches and writes through a
//! shared mapping, each checked against an in-memory model of what the
//! file must hold, with random reads verified as it goes and the whole
//! file at the end. A byte refreshd lost or resurrected shows as a
//! mismatch.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How the exerciser holds the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holding {
    /// Open for the whole run (refreshd relocates it).
    KeptOpen,
    /// Opened for each operation (refreshd gets its lease in between,
    /// and loses it to the next open).
    PerOperation,
}

/// What a run did.
#[derive(Debug, Default, Clone)]
pub struct Ran {
    pub operations: u64,
    pub verified_bytes: u64,
}

/// A small xorshift: deterministic per seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

/// Exercises `path` for `time` (creating it with `size` bytes of data),
/// then verifies all of it. `Err` names the first mismatch.
pub fn run(path: &Path, size: u64, time: Duration, holding: Holding, seed: u64) -> io::Result<Ran> {
    let mut rng = Rng(seed | 1);
    let mut model: Vec<u8> = (0..size).map(|_| rng.next() as u8).collect();
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    f.write_all_at(&model, 0)?;
    f.sync_all()?;
    let mut kept = Some(f).filter(|_| holding == Holding::KeptOpen);
    let mut ran = Ran::default();
    let end = Instant::now() + time;
    while Instant::now() < end {
        let opened;
        let f = match &kept {
            Some(f) => f,
            None => {
                opened = OpenOptions::new().read(true).write(true).open(path)?;
                &opened
            }
        };
        one_op(f, &mut model, &mut rng, size, path, &mut ran)?;
        ran.operations += 1;
        if holding == Holding::PerOperation {
            std::thread::sleep(Duration::from_millis(rng.below(20)));
        }
    }
    let f = match kept.take() {
        Some(f) => f,
        None => File::open(path)?,
    };
    verify(&f, &model, 0, model.len() as u64, path)?;
    ran.verified_bytes += model.len() as u64;
    Ok(ran)
}

fn one_op(
    f: &File,
    model: &mut Vec<u8>,
    rng: &mut Rng,
    size: u64,
    path: &Path,
    ran: &mut Ran,
) -> io::Result<()> {
    let len_now = model.len() as u64;
    match rng.below(10) {
        0..=3 => {
            let off = rng.below(size);
            let n = 1 + rng.below(64 << 10).min(size.saturating_sub(off));
            let data: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            f.write_all_at(&data, off)?;
            let end = (off + n) as usize;
            if model.len() < end {
                model.resize(end, 0);
            }
            model[off as usize..end].copy_from_slice(&data);
        }
        4 => {
            let to = size / 2 + rng.below(size);
            f.set_len(to)?;
            model.resize(to as usize, 0);
        }
        5 if len_now > 0 => {
            let off = rng.below(len_now) / 4096 * 4096;
            let n = (1 + rng.below(16)) * 4096;
            let n = n.min(len_now - off);
            rustix::fs::fallocate(
                f,
                rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
                off,
                n,
            )?;
            model[off as usize..(off + n) as usize].fill(0);
        }
        6 if len_now >= 4096 => mmap_write(f, model, rng)?,
        _ if len_now > 0 => {
            let off = rng.below(len_now);
            let n = 1 + rng.below(128 << 10).min(len_now - off - 1);
            verify(f, model, off, n, path)?;
            ran.verified_bytes += n;
        }
        _ => {}
    }
    Ok(())
}

/// Writes a few bytes through a shared mapping of one page.
fn mmap_write(f: &File, model: &mut [u8], rng: &mut Rng) -> io::Result<()> {
    let pages = model.len() as u64 / 4096;
    let page = rng.below(pages);
    let off = rng.below(4096 - 16) as usize;
    let data: Vec<u8> = (0..16).map(|_| rng.next() as u8).collect();
    // SAFETY: a fresh shared mapping of one page inside the file's size,
    // written within its bounds and unmapped before returning.
    unsafe {
        let p = rustix::mm::mmap(
            std::ptr::null_mut(),
            4096,
            rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
            rustix::mm::MapFlags::SHARED,
            f.as_fd(),
            page * 4096,
        )?;
        std::ptr::copy_nonoverlapping(data.as_ptr(), p.cast::<u8>().add(off), 16);
        rustix::mm::msync(p, 4096, rustix::mm::MsyncFlags::SYNC)?;
        rustix::mm::munmap(p, 4096)?;
    }
    let at = (page * 4096) as usize + off;
    model[at..at + 16].copy_from_slice(&data);
    Ok(())
}

fn verify(f: &File, model: &[u8], off: u64, n: u64, path: &Path) -> io::Result<()> {
    let mut got = vec![0u8; n as usize];
    f.read_exact_at(&mut got, off)?;
    let want = &model[off as usize..(off + n) as usize];
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        return Err(io::Error::other(format!(
            "{}: byte {} is {:#04x}, the model says {:#04x}",
            PathBuf::from(path).display(),
            off + i as u64,
            got[i],
            want[i]
        )));
    }
    let len = f.metadata()?.len();
    if len != model.len() as u64 {
        return Err(io::Error::other(format!(
            "{}: {len} bytes, the model says {}",
            path.display(),
            model.len()
        )));
    }
    Ok(())
}
