//! Reading a chunk with every buffer of a ring in flight.

use std::io;
use std::time::Duration;

use crate::engine::safety::plan::Chunk;
use crate::io::backend::Op;
use crate::io::fileio::FileIo;

/// Reads `c` in pieces of one buffer with every buffer of `io` in flight,
/// handing each piece read whole to `sink` (offset, bytes). Returns the
/// pieces that failed to read. On an error (a submit, a wait, or the
/// sink's: ENOSPC, EDQUOT) it stops submitting and reaps everything still
/// in flight before it returns: no read of this chunk outlives the call.
pub fn read_pieces(
    io: &mut FileIo<'_>,
    c: Chunk,
    sink: &mut dyn FnMut(u64, &[u8]) -> io::Result<()>,
) -> io::Result<Vec<(u64, usize)>> {
    let piece = io.pool().buf_len() as u64;
    let mut free: Vec<usize> = (0..io.pool().count()).collect();
    let mut at: Vec<(u64, usize)> = vec![(0, 0); free.len()];
    let mut next = c.offset;
    let mut failed = vec![];
    let mut error: Option<io::Error> = None;
    loop {
        while error.is_none() && next < c.end() {
            let Some(b) = free.pop() else { break };
            let n = (c.end() - next).min(piece) as usize;
            if let Err(e) = io.submit(b, Op::Read, next, n) {
                free.push(b);
                error = Some(e.into());
                break;
            }
            at[b] = (next, n);
            next += n as u64;
        }
        if io.in_flight() == 0 {
            break;
        }
        let done = match io.wait(Duration::from_secs(1)) {
            Ok(Some(d)) => d,
            Ok(None) => continue,
            Err(e) => {
                // The handle drains (or poisons the ring) on its own.
                let _ = io.drain();
                return Err(error.unwrap_or_else(|| e.into()));
            }
        };
        let Some(&(off, n)) = at.get(done.buf) else {
            error.get_or_insert_with(|| io::Error::other("completion for an unknown buffer"));
            continue;
        };
        free.push(done.buf);
        match done.result {
            Ok(got) if got == n => {
                if error.is_none() {
                    if let Err(e) = sink(off, &io.pool().get(done.buf)[..n]) {
                        error = Some(e);
                    }
                }
            }
            _ => failed.push((off, n)),
        }
    }
    if let Some(e) = error {
        return Err(e);
    }
    failed.sort_unstable();
    Ok(failed)
}
