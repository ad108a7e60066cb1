//! The device's channels: a counting semaphore, one permit per request
//! served at once (like flash dies).

use std::sync::{Condvar, Mutex};

/// A counting semaphore: the device's channels.
#[derive(Debug)]
pub(super) struct Channels {
    pub(super) free: Mutex<u32>,
    pub(super) cv: Condvar,
}

impl Channels {
    pub(super) fn acquire(&self) {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        while *free == 0 {
            free = self.cv.wait(free).unwrap_or_else(|e| e.into_inner());
        }
        *free -= 1;
    }

    pub(super) fn release(&self) {
        *self.free.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.cv.notify_one();
    }
}
