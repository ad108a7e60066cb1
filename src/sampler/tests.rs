use super::*;

#[test]
fn percentiles_interpolate_between_ranks() {
    let p = Percentiles::of(&[1.0, 2.0, 3.0, 4.0, 5.0]).expect("values");
    assert_eq!(
        (p.p25, p.p50, p.p75, p.mean, p.count),
        (2.0, 3.0, 4.0, 3.0, 5)
    );
    assert!((p.p95 - 4.8).abs() < 1e-9);
    let one = Percentiles::of(&[7.0]).expect("one value");
    assert_eq!((one.p25, one.p95), (7.0, 7.0));
    assert!(Percentiles::of(&[]).is_none());
    // Order does not matter.
    assert_eq!(Percentiles::of(&[5.0, 1.0, 4.0, 2.0, 3.0]), Some(p));
}

#[test]
fn the_canary_shrinks_to_what_the_filesystem_can_spare() {
    let mib = 1 << 20;
    assert_eq!(
        canary_fits(32 * mib, 10_000 * mib, 64 * mib),
        Some(32 * mib)
    );
    // 80 MiB free, 64 MiB reserve: a 16 MiB canary, not none.
    assert_eq!(canary_fits(32 * mib, 80 * mib, 64 * mib), Some(16 * mib));
    assert_eq!(
        canary_fits(32 * mib, 66 * mib, 64 * mib),
        None,
        "less than a region"
    );
    // The refresh watermark (1 GiB by default) is not the canary's need.
    assert!(canary_fits(32 * mib, 600 * mib, CANARY_RESERVE.min(1 << 30)).is_some());
}

#[test]
fn buckets_cover_every_age() {
    assert_eq!(bucket_of(0.0), 0);
    assert_eq!(bucket_of(0.99), 0);
    assert_eq!(bucket_of(1.0), 1);
    assert_eq!(bucket_of(6.5), 6);
    assert_eq!(bucket_of(8.0), 7);
    assert_eq!(bucket_of(100.0), BUCKET_EDGES.len() - 1);
    assert_eq!(bucket_label(0), "0-1");
    assert_eq!(bucket_label(BUCKET_EDGES.len() - 1), "24+");
}

/// A file of `len` bytes in `dir`, opened for O_DIRECT reads.
fn readable(dir: &Path, name: &str, len: usize) -> Candidate {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(name);
    std::fs::write(&path, vec![7u8; len]).unwrap_or_else(|e| panic!("{e}"));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(OFlags::DIRECT.bits() as i32)
        .open(&path)
        .unwrap_or_else(|e| panic!("{e}"));
    Candidate {
        fd: f.into(),
        extents: vec![(0, len as u64)],
        total: len as u64,
    }
}

/// The canary is read in step with the stale data: none of it before the
/// stale reads are [`read::SETTLE`] through, and by the time they are
/// three quarters through, the canary has read at least half of its
/// budget, every region among the stale reads. Read last (the sampler
/// before 2026-11-28, or `InStep` that does not keep step), it would meet
/// a burst of load the stale reads did not, or miss one they met.
#[test]
fn the_canary_is_read_in_step_with_the_stale_data() {
    use std::os::fd::AsRawFd;
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap_or_else(|e| panic!("{e}"));
    let stale = [readable(tmp.path(), "stale", 32 * MIB)];
    let stale_fd = stale[0].fd.as_raw_fd();
    let run = beside_a_canary(tmp.path(), &stale);
    let (budget, mib) = (CANARY_RUN_BUDGET, MIB);
    assert!(
        run.stale_bytes > budget * 9 / 10 && run.stale_bytes <= budget,
        "{} of {budget}",
        run.stale_bytes
    );
    assert!(
        run.canary_bytes > Some(7 * mib as u64) && run.canary_bytes <= Some(8 * mib as u64),
        "{:?}",
        run.canary_bytes
    );
    // The stale reads' share done before each canary read.
    let mut seen = 0;
    let mut canary_at = vec![];
    for &(fd, len) in &run.log {
        if fd == stale_fd {
            seen += len;
        } else {
            assert_eq!(fd, run.canary_fd);
            canary_at.push((seen as f64 / budget as f64, len));
        }
    }
    assert!(
        canary_at.iter().all(|&(at, _)| at >= read::SETTLE),
        "a canary read before the stale reads settled: {canary_at:?}"
    );
    let by_three_quarters: u64 = canary_at
        .iter()
        .filter(|&&(at, _)| at <= 0.75)
        .map(|&(_, len)| len)
        .sum();
    assert!(
        by_three_quarters >= 4 * MIB as u64,
        "{by_three_quarters} bytes of the canary read by three quarters of the stale reads: {canary_at:?}"
    );
}

/// A bucket that reads nothing of its budget (its files would not open)
/// still moves the canary on: it is read while the buckets are, not left
/// for the end.
#[test]
fn a_bucket_that_reads_nothing_moves_the_canary_on() {
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap_or_else(|e| panic!("{e}"));
    let run = beside_a_canary(tmp.path(), &[]);
    assert_eq!(run.stale_bytes, 0);
    assert!(
        run.canary_bytes > Some(7 * MIB as u64),
        "{:?}",
        run.canary_bytes
    );
    assert_eq!(
        run.log.len(),
        run.reads_during,
        "the canary was left for the end"
    );
}

const MIB: usize = 1 << 20;
/// The stale reads' budget of [`beside_a_canary`].
const CANARY_RUN_BUDGET: u64 = 24 * MIB as u64;

/// What [`beside_a_canary`] read.
struct CanaryRun {
    stale_bytes: u64,
    canary_bytes: Option<u64>,
    canary_fd: std::os::fd::RawFd,
    /// Every read, in order: its file and length.
    log: Vec<(std::os::fd::RawFd, u64)>,
    /// How many of them were made before the canary was finished.
    reads_during: usize,
}

/// Measures `stale` on a budget of [`CANARY_RUN_BUDGET`] with an 8 MiB
/// canary in `dir` read in step, then finishes the canary.
fn beside_a_canary(dir: &Path, stale: &[Candidate]) -> CanaryRun {
    use std::os::fd::AsRawFd;
    let canary = [readable(dir, "canary", 8 * MIB)];
    let mut reader = Reader::new().unwrap_or_else(|e| panic!("{e}"));
    let mut rng = SmallRng::seed_from_u64(1);
    let budget = CANARY_RUN_BUDGET;
    let mut in_step = InStep::new(Some(Plan::new(&canary, 8 * MIB as u64)), budget);
    let mut reads = Reads {
        reader: &mut reader,
        rng: &mut rng,
        fresh: &mut in_step,
    };
    let stale_bytes = measure(&mut reads, stale, budget).bytes;
    let reads_during = reader.log.len();
    let canary_bytes = in_step.finish(&mut reader, &mut rng).map(|a| a.bytes);
    CanaryRun {
        stale_bytes,
        canary_bytes,
        canary_fd: canary[0].fd.as_raw_fd(),
        log: reader.log,
        reads_during,
    }
}
