//! Relocation against the free-space watermark, and the speed of a
//! relocated in-use file on the aged testbed.

use super::*;

fn free_bytes(p: &Path) -> u64 {
    let s = rustix::fs::statvfs(p).unwrap();
    s.f_bavail * s.f_frsize
}

#[test]
fn privileged_relocation_stops_at_the_free_space_watermark() {
    if !privileged("privileged_relocation_stops_at_the_free_space_watermark") {
        return;
    }
    for kind in FS {
        let fs = LoopFs::new(kind, 320);
        let p = fs.path("big");
        write_file(&p, &pattern(16 * MIB, 4));
        // Fill the filesystem up to ~40 MiB free.
        let filler = File::create(fs.path("filler")).unwrap();
        let fill = free_bytes(&fs.mnt).saturating_sub(40 << 20);
        rustix::fs::fallocate(&filler, rustix::fs::FallocateFlags::empty(), 0, fill).unwrap();
        drop(filler);
        fs.sync();
        let free = free_bytes(&fs.mnt);
        assert!(free < 48 << 20, "{kind}: setup left {free} free");
        let before = (fingerprint(&p), physical(&p));
        // 32 MiB must stay free; a 16 MiB chunk would need 48.
        let (code, files, _) = refresh_json(
            &[
                "--strategy",
                "relocate",
                "--min-free",
                "32MiB",
                "--relocate-chunk",
                "16MiB",
                // Units at the full rate from the start (no probe at the
                // floor, whose units are small enough to fit).
                "--yield",
                "off",
            ],
            &[&p],
        );
        let r = &files[0];
        assert_eq!(code, 0, "{kind}: {r}");
        assert_eq!(r["status"], "skipped", "{kind}: {r}");
        assert_eq!(r["reason"], "low_space", "{kind}: {r}");
        assert!(
            r["detail"].as_str().unwrap().contains("watermark"),
            "{kind}: {r}"
        );
        assert_eq!(
            (fingerprint(&p), physical(&p)),
            before,
            "{kind}: nothing changed"
        );

        // The guard is what stops it: with the check switched off the data
        // is moved although free space is below the watermark.
        let cfg = EngineConfig {
            strategy: Strategy::Relocate,
            min_free: Some(refreshd::units::ByteSize(32 << 20)),
            relocate_chunk: 16 << 20,
            unsafe_switches: UnsafeSwitches {
                no_space_check: true,
                ..UnsafeSwitches::default()
            },
            ..EngineConfig::default()
        };
        let engine = Engine::start(cfg).unwrap();
        let rep = engine.refresh(Target::for_path(&p).unwrap(), None);
        assert_eq!(rep.strategy, "relocate");
        assert_ne!(
            physical(&p),
            before.1,
            "{kind}: without the guard it relocates: {rep:?}"
        );
    }
}

#[test]
fn privileged_relocated_in_use_file_reads_at_fresh_speed_on_the_aged_testbed() {
    if !privileged("privileged_relocated_in_use_file_reads_at_fresh_speed_on_the_aged_testbed") {
        return;
    }
    for kind in ["ext4", "xfs", "btrfs"] {
        let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
        let opts = DriveOptions {
            size: 1 << 30,
            fs: kind.into(),
            ..DriveOptions::default()
        };
        let d = Drive::up(tmp.path(), &opts).unwrap();
        let p = d.path("segment");
        let data = Arc::new(pattern(48 * MIB, 11));
        write_file(&p, &data);
        d.sync().unwrap();
        d.age(6.0);
        let fresh = d.path("fresh");
        write_file(&fresh, &pattern(48 * MIB, 12));
        d.sync().unwrap();
        drop_caches();
        let slow = testbed::measure::bulk_read_parallel(&p, 8).unwrap();

        let stop = Arc::new(AtomicBool::new(false));
        let reader = mmap_reader(&p, data.clone(), stop.clone(), Arc::default());
        let (code, files, _) = refresh_json(&[], &[&p]);
        stop.store(true, Ordering::Relaxed);
        let (_, wrong) = reader.join().unwrap();
        let r = &files[0];
        assert_eq!(
            (code, r["strategy"].as_str()),
            (0, Some("relocate")),
            "{kind}: {r}"
        );
        assert_eq!(wrong, 0, "{kind}");
        // Best of three, interleaved: other tests share the two CPUs.
        let (mut after, mut reference) = (0f64, 0f64);
        for _ in 0..3 {
            drop_caches();
            after = after.max(testbed::measure::bulk_read_parallel(&p, 8).unwrap());
            drop_caches();
            reference = reference.max(testbed::measure::bulk_read_parallel(&fresh, 8).unwrap());
        }
        eprintln!(
            "{kind}: aged {:.0} MB/s, relocated {:.0} MB/s, fresh {:.0} MB/s",
            slow / 1e6,
            after / 1e6,
            reference / 1e6
        );
        assert!(
            after >= 0.8 * reference,
            "{kind}: {after:.0} vs fresh {reference:.0}"
        );
        assert!(
            slow < 0.5 * reference,
            "{kind}: setup: the aged file was not slow"
        );
        assert_eq!(std::fs::read(&p).unwrap(), *data, "{kind}");
    }
}
