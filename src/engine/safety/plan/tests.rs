use super::*;
use proptest::prelude::*;

fn params(size: u64, align: u64, chunk: u64) -> PlanParams {
    PlanParams {
        size,
        align,
        chunk,
        rewrite_shared: false,
        unsafe_write_holes: false,
        unsafe_direct_tail: false,
    }
}

fn ext(logical: u64, length: u64, flags: u32) -> Extent {
    Extent {
        logical,
        physical: logical + 1_000_000,
        length,
        flags,
    }
}

#[test]
fn tail_is_exact_and_buffered() {
    let p = plan(
        &params(10_000, 4096, 8192),
        &[0..10_000],
        &[ext(0, 12_288, 0)],
    );
    assert_eq!(
        p.chunks,
        vec![
            Chunk {
                offset: 0,
                len: 8192,
                direct: true
            },
            Chunk {
                offset: 8192,
                len: 1808,
                direct: false
            },
        ]
    );
}

#[test]
fn unwritten_shared_and_inline_are_excluded() {
    let size = 5 * 4096;
    let extents = [
        ext(0, 4096, 0),
        ext(4096, 4096, syscalls::FIEMAP_EXTENT_UNWRITTEN),
        ext(8192, 4096, syscalls::FIEMAP_EXTENT_SHARED),
        ext(12_288, 4096, syscalls::FIEMAP_EXTENT_ENCODED),
        ext(
            16_384,
            4096,
            syscalls::FIEMAP_EXTENT_DATA_INLINE | syscalls::FIEMAP_EXTENT_LAST,
        ),
    ];
    let p = plan(&params(size, 4096, 1 << 20), &[0..size], &extents);
    assert_eq!(
        p.chunks,
        vec![Chunk {
            offset: 0,
            len: 4096,
            direct: true
        }]
    );
    assert_eq!(p.excluded.unwritten, 4096);
    assert_eq!(p.excluded.shared, 4096);
    assert_eq!(p.excluded.encoded, 4096);
    assert_eq!(p.excluded.inline, 4096);
}

#[test]
fn shared_extents_are_planned_when_asked() {
    let mut pp = params(8192, 4096, 1 << 20);
    pp.rewrite_shared = true;
    let p = plan(
        &pp,
        &[0..8192],
        &[ext(0, 8192, syscalls::FIEMAP_EXTENT_SHARED)],
    );
    assert_eq!(p.bytes(), 8192);
}

#[test]
fn unsafe_switches_break_the_layout() {
    // The guard: a hole between two data blocks is not planned...
    let safe = plan(
        &params(12_288, 4096, 4096),
        &[0..4096, 8192..12_288],
        &[ext(0, 4096, 0), ext(8192, 4096, 0)],
    );
    assert_eq!(safe.bytes(), 8192);
    // ...and switching it off plans the hole too.
    let mut pp = params(12_288, 4096, 4096);
    pp.unsafe_write_holes = true;
    assert_eq!(plan(&pp, &[], &[]).bytes(), 12_288);
    // A direct tail goes past EOF.
    let mut pp = params(10_000, 4096, 4096);
    pp.unsafe_direct_tail = true;
    let p = plan(&pp, &[0..10_000], &[ext(0, 12_288, 0)]);
    assert!(p.chunks.iter().any(|c| c.end() > 10_000));
}

/// Random layouts: SEEK_DATA ranges and non-overlapping FIEMAP extents
/// (as the kernel reports them) with assorted flags.
fn arb_layout() -> impl Strategy<Value = (u64, u64, u64, Vec<Range<u64>>, Vec<Extent>)> {
    let flag = prop_oneof![
        Just(0u32),
        Just(0u32),
        Just(syscalls::FIEMAP_EXTENT_MERGED),
        Just(syscalls::FIEMAP_EXTENT_UNWRITTEN),
        Just(syscalls::FIEMAP_EXTENT_SHARED),
        Just(syscalls::FIEMAP_EXTENT_DATA_INLINE),
        Just(syscalls::FIEMAP_EXTENT_ENCODED),
    ];
    (
        0u32..4,
        0u32..6,
        1u64..300_000,
        proptest::collection::vec((0u64..300_000, 1u64..40_000), 0..6),
        proptest::collection::vec((0u64..20_000, 1u64..60_000, flag), 0..8),
    )
        .prop_map(|(align_pow, chunk_mul, size, ranges, exts)| {
            let align = 512u64 << align_pow;
            let chunk = align << chunk_mul;
            let seek = normalize(
                ranges
                    .into_iter()
                    .map(|(s, l)| s.min(size)..(s + l).min(size))
                    .collect(),
            );
            let mut pos = 0;
            let extents = exts
                .into_iter()
                .map(|(gap, len, flags)| {
                    let e = ext(pos + gap, len, flags);
                    pos += gap + len;
                    e
                })
                .collect();
            (size, align, chunk, seek, extents)
        })
}

proptest! {
    #[test]
    fn chunks_cover_exactly_the_writable_data(
        (size, align, chunk, seek, extents) in arb_layout()
    ) {
        let p = plan(&params(size, align, chunk), &seek, &extents);
        let plain: Vec<Range<u64>> = extents.iter()
            .filter(|e| e.flags & !syscalls::FIEMAP_EXTENT_MERGED == 0)
            .map(|e| e.logical.min(size)..(e.logical + e.length).min(size))
            .collect();
        let expected = intersect(&seek, &normalize(plain));
        let got = normalize(p.chunks.iter().map(|c| c.offset..c.end()).collect());
        prop_assert_eq!(&got, &expected);
        let mut prev_end = 0;
        for c in &p.chunks {
            prop_assert!(c.len > 0);
            prop_assert!(c.offset >= prev_end, "chunks overlap or are unsorted");
            prop_assert!(c.end() <= size, "chunk past EOF: {:?} size {}", c, size);
            if c.direct {
                prop_assert_eq!(c.offset % align, 0);
                prop_assert_eq!(c.len % align, 0);
                prop_assert!(c.len <= chunk);
            } else {
                prop_assert!(c.len < 2 * align);
            }
            prev_end = c.end();
        }
        let excluded: u64 = extents.iter()
            .filter(|e| e.flags & !syscalls::FIEMAP_EXTENT_MERGED != 0)
            .map(|e| (e.logical + e.length).min(size).saturating_sub(e.logical.min(size)))
            .sum();
        prop_assert_eq!(p.excluded.total(), excluded);
    }

    #[test]
    fn extents_with_only_plain_flags_plan_their_data_exactly(
        size in 1u64..200_000, align_pow in 0u32..4, holes in proptest::collection::vec((0u64..200_000, 1u64..20_000), 0..5)
    ) {
        let align = 512u64 << align_pow;
        let hole_ranges = normalize(holes.into_iter().map(|(s, l)| s.min(size)..(s + l).min(size)).collect());
        // data = [0,size) minus holes
        let mut data = Vec::new();
        let mut pos = 0;
        for h in &hole_ranges { if h.start > pos { data.push(pos..h.start); } pos = pos.max(h.end); }
        if pos < size { data.push(pos..size); }
        let extents: Vec<Extent> = data.iter().map(|r| ext(r.start, r.end - r.start, 0)).collect();
        let p = plan(&params(size, align, align * 4), &data, &extents);
        let got = normalize(p.chunks.iter().map(|c| c.offset..c.end()).collect());
        prop_assert_eq!(got, normalize(data));
        // The last chunk never goes past EOF.
        if let Some(last) = p.chunks.last() { prop_assert!(last.end() <= size); }
    }
}
