//! Owns page-aligned I/O memory: O_DIRECT needs buffers aligned to the logical block size,
//! and 4096 covers every device we meet; one allocation holds all the slots of a job.

use std::alloc::{alloc_zeroed, dealloc, Layout};

/// The alignment of every I/O buffer (a page, and a multiple of any logical block size).
pub const BUFFER_ALIGN: usize = 4096;

/// `slots` buffers of `slot_bytes` each, contiguous, 4096-aligned, zero-filled.
pub struct AlignedBuffer {
    ptr: *mut u8,
    layout: Layout,
    slot_bytes: usize,
    slots: usize,
}

// SAFETY: the buffer is plain memory owned by this value; sharing rules are those of &/&mut.
unsafe impl Send for AlignedBuffer {}
// SAFETY: shared access only hands out `&[u8]` views.
unsafe impl Sync for AlignedBuffer {}

impl AlignedBuffer {
    /// Allocates the slots; `None` when the size overflows or memory is exhausted.
    pub fn new(slot_bytes: usize, slots: usize) -> Option<Self> {
        // Round each slot up so every slot starts aligned, whatever the block size.
        let stride = slot_bytes.checked_add(BUFFER_ALIGN - 1)? / BUFFER_ALIGN * BUFFER_ALIGN;
        let total = stride.checked_mul(slots)?.max(BUFFER_ALIGN);
        let layout = Layout::from_size_align(total, BUFFER_ALIGN).ok()?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return None;
        }
        Some(AlignedBuffer {
            ptr,
            layout,
            slot_bytes: stride,
            slots,
        })
    }

    /// The distance between slot starts (the block size rounded up to 4096).
    pub fn stride(&self) -> usize {
        self.slot_bytes
    }

    pub fn slots(&self) -> usize {
        self.slots
    }

    /// The raw start of slot `index`, for the kernel.
    pub fn slot_ptr(&self, index: usize) -> *mut u8 {
        assert!(index < self.slots.max(1));
        // SAFETY: index < slots, so the offset stays inside the allocation.
        unsafe { self.ptr.add(index * self.slot_bytes) }
    }

    pub fn slot(&self, index: usize, len: usize) -> &[u8] {
        assert!(len <= self.slot_bytes);
        // SAFETY: inside the allocation, initialised (zeroed at allocation).
        unsafe { std::slice::from_raw_parts(self.slot_ptr(index), len) }
    }

    pub fn slot_mut(&mut self, index: usize, len: usize) -> &mut [u8] {
        assert!(len <= self.slot_bytes);
        // SAFETY: inside the allocation; &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.slot_ptr(index), len) }
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, self.layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_aligned_and_disjoint() {
        let mut buf = AlignedBuffer::new(1000, 3).unwrap();
        assert_eq!(buf.stride(), 4096);
        for i in 0..3 {
            assert_eq!(buf.slot_ptr(i) as usize % BUFFER_ALIGN, 0);
        }
        buf.slot_mut(1, 1000).fill(7);
        assert!(buf.slot(0, 1000).iter().all(|&b| b == 0));
        assert!(buf.slot(1, 1000).iter().all(|&b| b == 7));
        assert!(buf.slot(2, 1000).iter().all(|&b| b == 0));
    }
}
