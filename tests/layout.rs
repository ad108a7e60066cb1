//! After `refreshd refresh`, everything the safety contract names is
//! unchanged (content, size, st_blocks, hole map, unwritten extents, mtime,
//! mode, xattrs), and the loop device really saw the data written.

use std::fs::{self, File};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::PathBuf;

use crate::helpers::*;
use refreshd::io::syscalls;

const SIZES: [u64; 9] = [0, 1, 511, 4095, 4096, 4097, 10_000, (1 << 20) + 1, 64 << 20];

fn unwritten_bytes(path: &std::path::Path) -> u64 {
    fiemap_bytes(path, syscalls::FIEMAP_EXTENT_UNWRITTEN)
}

fn layout_case(kind: &'static str) {
    let fs = LoopFs::new(kind, 512);
    let dir = fs.path("data");
    fs::create_dir(&dir).unwrap();
    let mut files: Vec<PathBuf> = vec![];
    for (i, &size) in SIZES.iter().enumerate() {
        let p = dir.join(format!("size-{size}"));
        write_file(&p, &pattern(size as usize, i as u64 + 1));
        files.push(p);
    }
    // Sparse: data, a hole, data, and a trailing hole.
    let sparse = dir.join("sparse");
    {
        let f = File::create(&sparse).unwrap();
        f.write_all_at(&pattern(64 << 10, 77), 0).unwrap();
        f.write_all_at(&pattern(10_000, 78), 1 << 20).unwrap();
        f.set_len(3 << 20).unwrap();
        f.sync_all().unwrap();
    }
    files.push(sparse.clone());
    // Preallocated (unwritten) with a written island in the middle.
    let prealloc = dir.join("fallocated");
    {
        let f = File::create(&prealloc).unwrap();
        rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::empty(), 0, 2 << 20).unwrap();
        f.write_all_at(&pattern(8192, 79), 512 << 10).unwrap();
        f.sync_all().unwrap();
    }
    files.push(prealloc.clone());
    for (i, p) in files.iter().enumerate() {
        fs::set_permissions(p, fs::Permissions::from_mode(0o640)).unwrap();
        rustix::fs::setxattr(
            p,
            "user.refreshd-test",
            format!("v{i}").as_bytes(),
            rustix::fs::XattrFlags::empty(),
        )
        .unwrap();
        set_mtime(p, 1_500_000_000, 123_456_789);
    }
    fs.sync();
    let before: Vec<Fingerprint> = files.iter().map(|p| fingerprint(p)).collect();
    let unwritten_before = unwritten_bytes(&prealloc);
    assert!(
        unwritten_before > 0,
        "{kind}: fallocate made no unwritten extents"
    );
    let written_before = fs.bytes_written();

    let (code, reports, summary) = refresh_json(&[], &[&dir]);
    assert_eq!(code, 0, "{kind}: {reports:#?}");
    fs.sync();
    let written = fs.bytes_written() - written_before;

    for (p, b) in files.iter().zip(&before) {
        let a = fingerprint(p);
        assert_eq!(&a, b, "{kind}: {} changed", p.display());
        let r = status_of(&reports, p);
        let status = r["status"].as_str().unwrap();
        let size = b.size;
        if size == 0 {
            assert_eq!(status, "skipped", "{kind}: empty file: {r}");
        } else if kind == "btrfs" && size < 4096 && status == "skipped" {
            // btrfs keeps small files inline in its metadata.
            assert!(r["excluded"]["inline"].as_u64().unwrap() > 0, "{r}");
        } else {
            assert_eq!(status, "refreshed", "{kind}: {}: {r}", p.display());
            let refreshed = r["bytes_refreshed"].as_u64().unwrap();
            assert_eq!(
                refreshed,
                r["bytes_planned"].as_u64().unwrap(),
                "{kind}: {r}"
            );
            if *p == sparse || *p == prealloc {
                // Only written data: SEEK_DATA may count unwritten extents
                // as data, the plan never does.
                let data: u64 = b.data_ranges.iter().map(|r| r.end - r.start).sum();
                assert!(refreshed > 0 && refreshed <= data, "{kind}: {r}");
            } else {
                assert_eq!(refreshed, size, "{kind}: {r}");
            }
        }
    }
    assert_eq!(
        unwritten_bytes(&prealloc),
        unwritten_before,
        "{kind}: unwritten extents were written"
    );
    let refreshed = summary["bytes_refreshed"].as_u64().unwrap();
    assert!(refreshed > 64 << 20, "{kind}: {summary}");
    // The physical check: the device saw at least every refreshed byte
    // written (plus some metadata), not merely a page-cache update.
    assert!(
        written >= refreshed && written < refreshed + (48 << 20),
        "{kind}: loop device wrote {written} bytes for {refreshed} refreshed"
    );
}

#[test]
fn privileged_refresh_keeps_content_and_layout_ext4() {
    if privileged("privileged_refresh_keeps_content_and_layout_ext4") {
        layout_case("ext4");
    }
}

#[test]
fn privileged_refresh_keeps_content_and_layout_xfs() {
    if privileged("privileged_refresh_keeps_content_and_layout_xfs") {
        layout_case("xfs");
    }
}

#[test]
fn privileged_refresh_keeps_content_and_layout_btrfs() {
    if privileged("privileged_refresh_keeps_content_and_layout_btrfs") {
        layout_case("btrfs");
    }
}

#[test]
fn privileged_verify_and_dry_run() {
    if !privileged("privileged_verify_and_dry_run") {
        return;
    }
    let fs = LoopFs::new("ext4", 256);
    let p = fs.path("f");
    write_file(&p, &pattern((8 << 20) + 123, 5));
    fs.sync();
    let before = fingerprint(&p);
    let ctime = |p: &std::path::Path| {
        use std::os::unix::fs::MetadataExt;
        let m = fs::metadata(p).unwrap();
        (m.ctime(), m.ctime_nsec())
    };
    let c0 = ctime(&p);
    fs.sync(); // the fingerprint's read dirtied atime
    let w0 = fs.bytes_written();
    let (code, reports, summary) = refresh_json(&["--dry-run"], &[&p]);
    assert_eq!(code, 0);
    assert_eq!(reports[0]["status"], "would_refresh");
    assert_eq!(
        reports[0]["bytes_planned"].as_u64().unwrap(),
        (8 << 20) + 123
    );
    assert_eq!(summary["bytes_refreshed"], 0);
    fs.sync();
    assert_eq!(fs.bytes_written(), w0, "dry run wrote to the device");
    assert_eq!(ctime(&p), c0, "dry run changed the inode");

    let (code, reports, _) = refresh_json(&["--verify"], &[&p]);
    assert_eq!(code, 0);
    assert_eq!(reports[0]["status"], "refreshed");
    assert_eq!(reports[0]["verified"], true);
    assert_eq!(fingerprint(&p), before);
    // ctime is the one thing that changes (documented): the kernel allows
    // no way to keep it.
    assert_ne!(ctime(&p), c0);
}
