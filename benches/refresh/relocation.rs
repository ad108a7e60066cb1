//! Relocation and aged-data benchmarks of `refreshd refresh`: the
//! relocation unit under a low rate, relocation against in place, and
//! reads of aged data before and after on the testbed.

use super::*;

/// Relocation keeps `--rate`: per filesystem, a file in use (held open,
/// so no lease) is first relocated unthrottled (the limit here), then a
/// file sized for 12 s at half that limit is relocated with that rate; the
/// achieved rate is printed as a ratio to the requested one (target
/// 0.95..1.05). `REFRESHD_BENCH_RELOCATE_RATE_MIB` (default 128) sizes the
/// unthrottled run.
pub(super) fn relocate_rate() {
    let mib = env_u64("REFRESHD_BENCH_RELOCATE_RATE_MIB", 128);
    println!("relocation throttle, a file in use, --strategy relocate:");
    // ext4 with its journal: without one, MOVE_EXT answers EBUSY here.
    for kind in ["ext4j", "xfs", "btrfs"] {
        let fs = helpers::LoopFs::new(kind, (mib * 4 + 512).max(1024));
        let file = fs.path("in-use");
        make_file(&file, mib, 45);
        fs.sync();
        let holder = File::open(&file).unwrap();
        let t0 = engine(&file, &["--strategy", "relocate"]);
        drop(holder);
        let limit = mib as f64 / t0.as_secs_f64();
        // Half the limit, and a paced file that fits (at most 2 × mib).
        let rate = ((limit / 2.0) as u64).clamp(1, (mib * 2 / 12).max(1));
        let size = rate * 12;
        let paced = fs.path("paced");
        make_file(&paced, size, 46);
        fs.sync();
        let _holder = File::open(&paced).unwrap();
        let t = engine(
            &paced,
            &["--strategy", "relocate", "--rate", &format!("{rate}MiB/s")],
        );
        let got = size as f64 / t.as_secs_f64();
        println!(
            "  {kind:<6} unthrottled {limit:>6.1} MiB/s; --rate {rate}MiB/s on {size} MiB: {:>6.2} s = {got:>6.2} MiB/s, ratio to the rate {:.3} (target 0.95..1.05)",
            t.as_secs_f64(),
            got / rate as f64
        );
    }
}

/// Relocation vs in-place on the same aged data, per filesystem: a file
/// aged 6 months before every run, `--strategy inplace` and `--strategy
/// relocate` alternating (`REFRESHD_BENCH_RELOCATE_MIB`, default 256;
/// `REFRESHD_BENCH_AGED_ROUNDS`, default 3).
pub(super) fn relocate() {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIPPED relocation benchmark: no /dev/fuse");
        return;
    }
    let mib = env_u64("REFRESHD_BENCH_RELOCATE_MIB", 256);
    let rounds = env_u64("REFRESHD_BENCH_AGED_ROUNDS", 3) as usize;
    println!("relocation vs in-place, {mib} MiB file aged 6 months before each run (testbed 840evo, 8 channels), {rounds} rounds, medians:");
    for fs in ["ext4", "xfs", "btrfs"] {
        let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
        let opts = testbed::DriveOptions {
            size: (mib << 20) * 2 + (512 << 20),
            fs: fs.into(),
            model: testbed::Model::preset("840evo").unwrap(),
            channels: 8,
            ..testbed::DriveOptions::default()
        };
        let d = testbed::Drive::up(tmp.path(), &opts).unwrap();
        let file = d.path("aged");
        make_file(&file, mib, 44);
        let (mut inplace, mut reloc) = (vec![], vec![]);
        for round in 0..rounds {
            for k in 0..2 {
                d.age(6.0);
                drop_caches();
                if (round + k) % 2 == 0 {
                    inplace.push(engine(&file, &["--strategy", "inplace"]));
                } else {
                    reloc.push(engine(&file, &["--strategy", "relocate"]));
                }
            }
        }
        let (mi, mr) = (median(&mut inplace), median(&mut reloc));
        let mbs = |t: Duration| (mib << 20) as f64 / t.as_secs_f64() / (1 << 20) as f64;
        println!(
            "  {fs:<6} in place {:>7.2} s ({:>6.1} MiB/s)   relocate {:>7.2} s ({:>6.1} MiB/s)   relocate/inplace time {:.2}",
            mi.as_secs_f64(),
            mbs(mi),
            mr.as_secs_f64(),
            mbs(mr),
            mr.as_secs_f64() / mi.as_secs_f64()
        );
    }
}

/// Engine vs dd on the emulated aging SSD.
pub(super) fn aged() {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIPPED aged-drive benchmark: no /dev/fuse");
        return;
    }
    let mib = env_u64("REFRESHD_BENCH_AGED_MIB", 512);
    let rounds = env_u64("REFRESHD_BENCH_AGED_ROUNDS", 3) as usize;
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let opts = testbed::DriveOptions {
        size: (mib << 20) * 2 + (256 << 20),
        model: testbed::Model::preset("840evo").unwrap(),
        channels: 8,
        ..testbed::DriveOptions::default()
    };
    let d = testbed::Drive::up(tmp.path(), &opts).unwrap();
    let file = d.path("aged");
    make_file(&file, mib, 43);
    let mut mem = BufferPool::new(mib as usize, 1 << 20);
    let (mut e, mut dd_t, mut l) = (vec![], vec![], vec![]);
    for round in 0..rounds {
        for k in 0..3 {
            // Every run makes the data fresh: age it again first.
            d.age(6.0);
            drop_caches();
            match (round + k) % 3 {
                0 => e.push(engine(&file, &[])),
                1 => dd_t.push(dd(&file)),
                _ => l.push(limit(&file, &mut mem)),
            }
        }
    }
    d.age(6.0);
    drop_caches();
    let aged_read = testbed::measure::bulk_read_parallel(&file, 8).unwrap();
    let (me, md, ml) = (median(&mut e), median(&mut dd_t), median(&mut l));
    let mbs = |t: Duration| (mib << 20) as f64 / t.as_secs_f64() / (1 << 20) as f64;
    println!("refresh of a {mib} MiB file aged 6 months on the testbed (840evo, 8 channels, ext4), {rounds} rounds, medians:");
    println!(
        "  refreshd refresh           {:>8.2} s  {:>7.1} MiB/s",
        me.as_secs_f64(),
        mbs(me)
    );
    println!(
        "  dd conv=notrunc direct     {:>8.2} s  {:>7.1} MiB/s",
        md.as_secs_f64(),
        mbs(md)
    );
    println!(
        "  device limit (r + w)       {:>8.2} s  {:>7.1} MiB/s",
        ml.as_secs_f64(),
        mbs(ml)
    );
    print_ratios(me, md, ml);
    println!(
        "  (aged bulk read, 8 readers: {:.1} MiB/s)",
        aged_read / (1 << 20) as f64
    );
}
