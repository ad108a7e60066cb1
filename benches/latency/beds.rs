//! The device models of the matrix: the testbed (an aged 840 EVO-like
//! drive in FUSE) with 1, 2, 4 and 8 channels, with a link cap and with
//! write fade; and a plain loop device (direct I/O onto this machine's
//! disk) with the `none`, `mq-deadline` and `bfq` schedulers.

use std::path::{Path, PathBuf};

use refreshd::io::block_reads::ReadTimes;

use crate::helpers::kernel::Tracefs;
use crate::helpers::{pattern, LoopFs};

pub const MIB: u64 = 1 << 20;
/// Files of the aged data set (several, so progress is seen per file).
pub const FILE_MIB: u64 = 4;

/// A device under test: where the files are, how to age them again.
pub struct Bed<'a> {
    pub name: String,
    pub dir: PathBuf,
    pub age: Box<dyn Fn() + 'a>,
    /// Others' reads of its block device, timed (`None`: this kernel or
    /// these privileges cannot; said once).
    pub reads: Option<ReadTimes>,
    /// Mounted for the refresh's own timing too, while the bed lives.
    pub _tracefs: Tracefs,
}

/// Times the reads of the block device `dev` (`/dev/loop3`).
fn time_reads(dev: &str) -> Option<ReadTimes> {
    let name = dev.trim_start_matches("/dev/").to_string();
    ReadTimes::start(Path::new("/sys"), &[name])
        .map_err(|e| eprintln!("the drive's reads are not timed: {e}"))
        .ok()
}

pub const NAMES: [&str; 9] = [
    "tb1",
    "tb2",
    "tb4",
    "tb8",
    "tb-link",
    "tb-fade",
    "loop-none",
    "loop-mq-deadline",
    "loop-bfq",
];

/// What a bed keeps alive while it is measured.
pub enum Device {
    Testbed(testbed::Drive),
    Loop(LoopFs),
}

pub fn make_files(dir: &Path, total_mib: u64) {
    use std::io::Write;
    std::fs::create_dir_all(dir.join("aged")).unwrap();
    for i in 0..total_mib / FILE_MIB {
        let mut f = std::fs::File::create(dir.join(format!("aged/seg{i:03}"))).unwrap();
        for k in 0..FILE_MIB {
            f.write_all(&pattern(MIB as usize, i * 1000 + k)).unwrap();
        }
        f.sync_all().unwrap();
    }
    write_app_file(dir);
}

/// The reader's file, (re)written: fresh data.
pub fn write_app_file(dir: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(dir.join("app")).unwrap();
    for k in 0..256 {
        f.write_all(&pattern(MIB as usize, 7_000 + k)).unwrap();
    }
    f.sync_all().unwrap();
}

/// Brings up the device named `name` (one of [`NAMES`]) in `tmp`; `Err`
/// says why this machine cannot (a scheduler its kernel does not offer).
pub fn device(name: &str, tmp: &Path, data_mib: u64) -> Result<Device, String> {
    match name {
        "tb1" | "tb2" | "tb4" | "tb8" | "tb-link" | "tb-fade" => {
            let channels = match name {
                "tb1" => 1,
                "tb2" => 2,
                "tb4" => 4,
                _ => 8,
            };
            let opts = testbed::DriveOptions {
                size: (data_mib + 256) * MIB * 2 + 256 * MIB,
                model: testbed::Model::preset("840evo").unwrap(),
                channels,
                ..testbed::DriveOptions::default()
            };
            let d = testbed::Drive::up(tmp, &opts).unwrap();
            if name == "tb-link" {
                // A port negotiated down: every byte at 120 MB/s.
                d.link_cap(120_000_000);
            }
            if name == "tb-fade" {
                // Written past 64 MiB since the last discard, every
                // request is 3 times slower.
                d.fade(64 * MIB, 3);
            }
            Ok(Device::Testbed(d))
        }
        _ => {
            let sched = name.trim_start_matches("loop-");
            let fs = LoopFs::with_options("ext4", data_mib + 1024, true);
            let dev = fs.dev.trim_start_matches("/dev/").to_string();
            let path = format!("/sys/block/{dev}/queue/scheduler");
            // Written, not looked up first: the kernel loads a
            // scheduler's module when it is asked for by name.
            if let Err(e) = std::fs::write(&path, sched) {
                let offered = std::fs::read_to_string(&path).unwrap_or_default();
                return Err(format!(
                    "the kernel refused the {sched} scheduler ({e}; it offers {})",
                    offered.trim()
                ));
            }
            Ok(Device::Loop(fs))
        }
    }
}

/// The bed on a device: its files made, and how to age them.
pub fn bed<'a>(name: &str, device: &'a Device, data_mib: u64) -> Bed<'a> {
    match device {
        Device::Testbed(d) => {
            let dir = d.path("bench");
            make_files(&dir, data_mib);
            let app = dir.clone();
            Bed {
                name: name.into(),
                dir,
                // The refresh's data ages 6 months; the reader's file is
                // written again, fresh, as the application's hot data is.
                age: Box::new(move || {
                    d.age(6.0);
                    write_app_file(&app);
                }),
                _tracefs: Tracefs::new(),
                reads: time_reads(&d.loop_dev),
            }
        }
        Device::Loop(fs) => {
            let dir = fs.path("bench");
            make_files(&dir, data_mib);
            Bed {
                name: name.into(),
                dir,
                age: Box::new(|| {}),
                _tracefs: Tracefs::new(),
                reads: time_reads(&fs.dev),
            }
        }
    }
}
