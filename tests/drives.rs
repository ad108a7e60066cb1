//! File → physical drive through sysfs: a loop device, btrfs' anonymous
//! device, a partition (resolves to its disk), and no drive for tmpfs.

use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;

use crate::helpers::*;
use refreshd::drive::{disk_stats, drives_of, DriveError};

fn loop_name(dev: &str) -> String {
    Path::new(dev)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .to_string()
}

#[test]
fn privileged_file_maps_to_its_loop_drive_with_identity_and_stats() {
    if !privileged("privileged_file_maps_to_its_loop_drive_with_identity_and_stats") {
        return;
    }
    for kind in ["ext4", "btrfs"] {
        let fs = LoopFs::new(kind, 256);
        let p = fs.path("f");
        write_file(&p, &pattern(1 << 20, 1));
        let drives = drives_of(&p).unwrap();
        assert_eq!(drives.len(), 1, "{kind}: {drives:?}");
        let d = &drives[0];
        assert_eq!(d.name, loop_name(&fs.dev), "{kind}");
        assert!(
            d.id.starts_with("loop:") && d.id.contains("disk.img"),
            "{kind}: identity {}",
            d.id
        );
        let before = disk_stats(&d.name).unwrap();
        write_file(&fs.path("g"), &pattern(4 << 20, 2));
        fs.sync();
        let after = disk_stats(&d.name).unwrap();
        assert!(
            after.write_bytes >= before.write_bytes + (4 << 20),
            "{kind}: {before:?} -> {after:?}"
        );
    }
}

/// A loop device with partition scanning, detached on drop.
struct PartLoop(String);
impl Drop for PartLoop {
    fn drop(&mut self) {
        let _ = Command::new("partx").arg("-d").arg(&self.0).status();
        let _ = Command::new("losetup").arg("-d").arg(&self.0).status();
    }
}

#[test]
fn privileged_partition_maps_to_its_disk() {
    if !privileged("privileged_partition_maps_to_its_disk") {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let img = dir.path().join("disk.img");
    let f = File::create(&img).unwrap();
    f.set_len(256 << 20).unwrap();
    // One MBR partition: Linux (0x83), from sector 2048 to the end.
    let mut mbr = [0u8; 512];
    let sectors: u32 = (256 << 20) / 512 - 2048;
    mbr[446 + 4] = 0x83;
    mbr[446 + 8..446 + 12].copy_from_slice(&2048u32.to_le_bytes());
    mbr[446 + 12..446 + 16].copy_from_slice(&sectors.to_le_bytes());
    mbr[510] = 0x55;
    mbr[511] = 0xaa;
    f.write_all_at(&mbr, 0).unwrap();
    drop(f);
    let out = run(Command::new("losetup")
        .args(["--find", "--show", "--partscan"])
        .arg(&img));
    let dev = PartLoop(String::from_utf8(out.stdout).unwrap().trim().to_string());
    let part = format!("{}p1", dev.0);
    for i in 0..100 {
        if Path::new(&part).exists() {
            break;
        }
        if i == 10 {
            // Kernels built without the MBR parser: let partx read the
            // table and add the partition (BLKPG).
            run(Command::new("partx").arg("-a").arg(&dev.0));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&part));
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    run(Command::new("mount").arg(&part).arg(&mnt));
    let _u = MountGuard(mnt.clone());
    let p = mnt.join("f");
    write_file(&p, b"on a partition");
    let drives = drives_of(&p).unwrap();
    assert_eq!(drives.len(), 1, "{drives:?}");
    assert_eq!(
        drives[0].name,
        loop_name(&dev.0),
        "the partition resolves to its whole disk"
    );
}

#[test]
fn privileged_tmpfs_has_no_drive() {
    if !privileged("privileged_tmpfs_has_no_drive") {
        return;
    }
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let p = dir.path().join("f");
    write_file(&p, b"memory");
    match drives_of(&p) {
        Err(DriveError::NoBlockDevice { .. }) => {}
        other => panic!("expected no block device, got {other:?}"),
    }
}
