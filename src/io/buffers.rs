//! Page-aligned I/O buffers for O_DIRECT, allocated once per engine thread.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

/// Alignment of every buffer: a page satisfies any device's DMA alignment.
pub const BUF_ALIGN: usize = 4096;

/// A fixed set of equally sized, page-aligned buffers.
#[derive(Debug)]
pub struct BufferPool {
    base: NonNull<u8>,
    layout: Layout,
    buf_len: usize,
    count: usize,
}

// SAFETY: the pool owns its allocation exclusively; moving it to another
// thread moves that ownership. Access goes through &mut self.
unsafe impl Send for BufferPool {}

impl BufferPool {
    /// `count` buffers of `buf_len` bytes (rounded up to the alignment).
    pub fn new(count: usize, buf_len: usize) -> BufferPool {
        let buf_len = buf_len.div_ceil(BUF_ALIGN).max(1) * BUF_ALIGN;
        let total = buf_len
            .checked_mul(count.max(1))
            .expect("buffer pool size overflows");
        let layout = Layout::from_size_align(total, BUF_ALIGN).expect("valid buffer layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        let base = NonNull::new(ptr).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        BufferPool {
            base,
            layout,
            buf_len,
            count: count.max(1),
        }
    }

    pub fn count(&self) -> usize {
        self.count
    }

    pub fn buf_len(&self) -> usize {
        self.buf_len
    }

    /// Raw pointer to buffer `i`, for the kernel.
    pub fn ptr(&self, i: usize) -> *mut u8 {
        assert!(i < self.count, "buffer index out of range");
        // SAFETY: i < count, so the offset stays inside the allocation.
        unsafe { self.base.as_ptr().add(i * self.buf_len) }
    }

    /// Buffer `i` as a slice.
    pub fn get(&self, i: usize) -> &[u8] {
        // SAFETY: ptr(i) points to buf_len initialised (zeroed) bytes owned
        // by the pool; the shared borrow of self keeps them alive.
        unsafe { std::slice::from_raw_parts(self.ptr(i), self.buf_len) }
    }

    /// Buffer `i` as a mutable slice.
    pub fn get_mut(&mut self, i: usize) -> &mut [u8] {
        // SAFETY: as in `get`, and &mut self makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr(i), self.buf_len) }
    }

    /// iovecs for `io_uring_register_buffers`.
    pub fn iovecs(&self) -> Vec<libc::iovec> {
        (0..self.count)
            .map(|i| libc::iovec {
                iov_base: self.ptr(i).cast(),
                iov_len: self.buf_len,
            })
            .collect()
    }
}

impl Drop for BufferPool {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout.
        unsafe { dealloc(self.base.as_ptr(), self.layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_and_disjoint() {
        let mut p = BufferPool::new(3, 5000);
        assert_eq!(p.buf_len(), 8192);
        for i in 0..3 {
            assert_eq!(p.ptr(i) as usize % BUF_ALIGN, 0);
            p.get_mut(i).fill(i as u8 + 1);
        }
        for i in 0..3 {
            assert!(p.get(i).iter().all(|&b| b == i as u8 + 1));
        }
    }
}
