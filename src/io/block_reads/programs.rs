//! The two programs, on the block layer's tracepoints: a read of one of
//! the watched drives is stamped when it is issued to the drive
//! (`block:block_rq_issue`); at its completion (`block:block_rq_complete`)
//! the time since is counted in a histogram bucket. Reads of the
//! refresh's own priorities are left out at both ends (see [`super`]).
//!
//! A request is known by its drive and first sector: of two reads of
//! the same sector in flight at once, the second's stamp replaces the
//! first's, and the first completion takes it. The time a read waits in
//! the I/O scheduler before it is issued is not counted: stamped when
//! queued (`block_rq_insert`), reads merged into another in bfq's queue
//! never completed as themselves, and their stamps, left behind, timed
//! later reads of their sectors at seconds (a loop device with bfq, p99.9
//! 33,825× idle); stamped at issue, a merged read was never stamped.

use super::asm::*;

/// Where the tracepoints' fields are in the record the programs see
/// (`/sys/kernel/tracing/events/block/block_rq_{issue,complete}/format`;
/// the same in both up to `rwbs`, and stable since Linux 6.5 added
/// `ioprio`; checked against the format files when the programs start).
pub const DEV: i16 = 8;
pub const SECTOR: i16 = 16;
pub const IOPRIO: i16 = 32;
pub const RWBS: i16 = 34;

/// Priorities whose reads are not counted: best-effort 7 and the idle
/// class, the refresh's own (see `crate::io::syscalls`), compared on
/// class and level only (the bits between are hints, Linux ≥ 6.6).
const IOPRIO_BE7: i32 = (2 << 13) | 7;
const IOPRIO_CLASS_AND_LEVEL: i32 = 0xe007;
const IOPRIO_CLASS_IDLE: i32 = 3;
/// `BPF_ANY`: a stamp left behind (a completion missed) is replaced.
const ANY: i32 = 0;

/// Histogram buckets: below 16 units (a unit is 1,024 ns) one per unit;
/// above, 16 to each doubling (a bucket spans at most 1/16 of its
/// lower bound), up to 2^24 units (17 s), where the last one takes the
/// rest.
pub const BUCKETS: usize = 336;
pub const UNIT_SHIFT: i32 = 10;
const MAX_UNITS: i32 = (1 << 24) - 1;

// Helper functions of the kernel (`enum bpf_func_id`).
const MAP_LOOKUP_ELEM: i32 = 1;
const MAP_UPDATE_ELEM: i32 = 2;
const MAP_DELETE_ELEM: i32 = 3;
const KTIME_GET_NS: i32 = 5;

/// The maps the programs share, by fd.
#[derive(Debug, Clone, Copy)]
pub struct Maps {
    /// Hash: the watched drives' `dev_t` (u32) → unused u32.
    pub drives: i32,
    /// Hash: `{dev u32, 0 u32, sector u64}` → when the read was issued
    /// (ns).
    pub issued: i32,
    /// Array of [`BUCKETS`] u64 counts.
    pub histogram: i32,
}

// Stack slots (below r10).
const DRIVE_KEY: i16 = -4;
const BUCKET_KEY: i16 = -8;
const REQUEST_KEY: i16 = -24;
const ISSUED_AT: i16 = -32;

/// Leaves the program unless the record's drive is watched.
fn watched_drive_only(p: &mut Program, maps: Maps) {
    p.push(load(W, 1, 6, DEV))
        .push(store(W, 10, DRIVE_KEY, 1))
        .push(alu_x(MOV, 2, 10))
        .push(alu_k(ADD, 2, DRIVE_KEY as i32))
        .push_map(load_map(1, maps.drives))
        .push(call(MAP_LOOKUP_ELEM))
        .jump_k(JEQ, 0, 0, "out");
}

/// The request's key `{dev, 0, sector}` at [`REQUEST_KEY`].
fn request_key(p: &mut Program) {
    p.push(load(W, 1, 6, DEV))
        .push(store(W, 10, REQUEST_KEY, 1))
        .push(store_k(W, 10, REQUEST_KEY + 4, 0))
        .push(load(DW, 1, 6, SECTOR))
        .push(store(DW, 10, REQUEST_KEY + 8, 1));
}

/// Leaves the program unless the record is a read ("R…"; a preflush
/// would put an 'F' first, reads have none) at a priority not ours.
fn others_reads_only(p: &mut Program) {
    p.push(load(B, 1, 6, RWBS))
        .jump_k(JNE, 1, i32::from(b'R'), "out")
        .push(load(H, 1, 6, IOPRIO))
        .push(alu_x(MOV, 2, 1))
        .push(alu_k(AND, 2, IOPRIO_CLASS_AND_LEVEL))
        .jump_k(JEQ, 2, IOPRIO_BE7, "out")
        .push(alu_k(RSH, 1, 13))
        .push(alu_k(AND, 1, 7))
        .jump_k(JEQ, 1, IOPRIO_CLASS_IDLE, "out");
}

/// What both programs start with: the record kept in r6, the program
/// left unless the record is others' read of a watched drive, and the
/// read's key on the stack.
fn others_read_of_a_watched_drive(maps: Maps) -> Program {
    let mut p = Program::default();
    p.push(alu_x(MOV, 6, 1));
    watched_drive_only(&mut p, maps);
    others_reads_only(&mut p);
    request_key(&mut p);
    p
}

fn leave(p: &mut Program) {
    p.label("out").push(alu_k(MOV, 0, 0)).push(exit());
}

/// `block_rq_issue`: a read of a watched drive, not at one of our
/// priorities, is stamped with the time.
pub fn on_issue(maps: Maps) -> Vec<Insn> {
    let mut p = others_read_of_a_watched_drive(maps);
    p.push(call(KTIME_GET_NS))
        .push(store(DW, 10, ISSUED_AT, 0))
        .push_map(load_map(1, maps.issued))
        .push(alu_x(MOV, 2, 10))
        .push(alu_k(ADD, 2, REQUEST_KEY as i32))
        .push(alu_x(MOV, 3, 10))
        .push(alu_k(ADD, 3, ISSUED_AT as i32))
        .push(alu_k(MOV, 4, ANY))
        .push(call(MAP_UPDATE_ELEM));
    leave(&mut p);
    p.finish()
}

/// `block_rq_complete`: a stamped read's time since it was issued,
/// counted in its bucket (the same reads only: a write or a read of ours
/// completing at a stamped sector leaves the stamp alone).
pub fn on_complete(maps: Maps) -> Vec<Insn> {
    let mut p = others_read_of_a_watched_drive(maps);
    p.push_map(load_map(1, maps.issued))
        .push(alu_x(MOV, 2, 10))
        .push(alu_k(ADD, 2, REQUEST_KEY as i32))
        .push(call(MAP_LOOKUP_ELEM))
        .jump_k(JEQ, 0, 0, "out")
        .push(load(DW, 7, 0, 0))
        .push_map(load_map(1, maps.issued))
        .push(alu_x(MOV, 2, 10))
        .push(alu_k(ADD, 2, REQUEST_KEY as i32))
        .push(call(MAP_DELETE_ELEM))
        .push(call(KTIME_GET_NS))
        .push(alu_x(SUB, 0, 7))
        .push(alu_x(MOV, 8, 0))
        .push(alu_k(RSH, 8, UNIT_SHIFT));
    bucket(&mut p, 8, 4);
    p.push(store(W, 10, BUCKET_KEY, 4))
        .push_map(load_map(1, maps.histogram))
        .push(alu_x(MOV, 2, 10))
        .push(alu_k(ADD, 2, BUCKET_KEY as i32))
        .push(call(MAP_LOOKUP_ELEM))
        .jump_k(JEQ, 0, 0, "out")
        .push(alu_k(MOV, 1, 1))
        .push(atomic_add(0, 0, 1));
    leave(&mut p);
    p.finish()
}

/// `out` = the bucket of the time in units in `v` (capped there), as
/// [`super::histogram::bucket_of`] computes it; r2, r3 and r5 are
/// scratch. Its own test runs these instructions.
pub fn bucket(p: &mut Program, v: Reg, out: Reg) {
    p.jump_k(JLT, v, MAX_UNITS, "b_capped")
        .push(alu_k(MOV, v, MAX_UNITS))
        .label("b_capped")
        .push(alu_x(MOV, out, v))
        .jump_k(JLT, v, 16, "b_done")
        // r3 = the highest bit set in v, by halving the search.
        .push(alu_x(MOV, 2, v))
        .push(alu_k(MOV, 3, 0));
    for (bits, label) in [(16, "b_8"), (8, "b_4"), (4, "b_2"), (2, "b_1"), (1, "b_0")] {
        p.jump_k(JLT, 2, 1 << bits, label)
            .push(alu_k(RSH, 2, bits))
            .push(alu_k(ADD, 3, bits))
            .label(label);
    }
    // out = (msb - 3) · 16 + the four bits below the highest.
    p.push(alu_x(MOV, 5, 3))
        .push(alu_k(SUB, 5, 4))
        .push(alu_x(RSH, out, 5))
        .push(alu_k(AND, out, 15))
        .push(alu_k(SUB, 3, 3))
        .push(alu_k(LSH, 3, 4))
        .push(alu_x(ADD, out, 3))
        .label("b_done");
}
