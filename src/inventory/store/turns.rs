//! Write turns on one state database: single statements first, then scan
//! batches in the order they asked.
//!
//! SQLite lets one writer in at a time and makes the others poll with
//! growing sleeps (its busy handler): with eight drives scanning, each
//! re-taking the write lock the moment it let it go, a drive's checkpoint
//! write lost every race for as long as the scans ran (20 s measured,
//! `tests/scale.rs`). In the daemon every connection to the database is
//! in one process, so its writers take turns here first. A single-row
//! write (a checkpoint, a refresh recorded, a baseline) goes ahead of
//! waiting scan batches and waits only for the transaction under way
//! (at most ~25 ms); scan batches are served in the order they asked.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

/// The queue of writers of one database.
#[derive(Debug, Default)]
pub struct Turns {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// Tickets of batch writers: the next one handed out, the one served.
    next: u64,
    serving: u64,
    /// Someone writes now.
    busy: bool,
    /// Single statements waiting (they go first).
    urgent: usize,
}

/// A writer's turn: the database is its to write until dropped.
#[derive(Debug)]
pub struct Turn {
    turns: Arc<Turns>,
    batch: bool,
}

impl Turns {
    /// The queue of the database at `path` (one per database per process).
    pub fn of(path: &Path) -> Arc<Turns> {
        static ALL: OnceLock<Mutex<HashMap<PathBuf, Arc<Turns>>>> = OnceLock::new();
        let all = ALL.get_or_init(Mutex::default);
        let mut all = all.lock().unwrap_or_else(|e| e.into_inner());
        all.entry(path.to_path_buf()).or_default().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait<'a>(&self, g: std::sync::MutexGuard<'a, State>) -> std::sync::MutexGuard<'a, State> {
        self.changed.wait(g).unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for a batch's turn: after every single statement waiting and
    /// every batch that asked earlier.
    pub fn batch(self: &Arc<Self>) -> Turn {
        let mut g = self.lock();
        let mine = g.next;
        g.next += 1;
        while g.serving != mine || g.busy || g.urgent > 0 {
            g = self.wait(g);
        }
        g.busy = true;
        Turn {
            turns: self.clone(),
            batch: true,
        }
    }

    /// Waits for a single statement's turn: only for the write under way.
    pub fn statement(self: &Arc<Self>) -> Turn {
        let mut g = self.lock();
        g.urgent += 1;
        while g.busy {
            g = self.wait(g);
        }
        g.urgent -= 1;
        g.busy = true;
        Turn {
            turns: self.clone(),
            batch: false,
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut g = self.turns.lock();
        g.busy = false;
        if self.batch {
            g.serving += 1;
        }
        self.turns.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn writers_are_served_in_the_order_they_asked() {
        let turns = Arc::new(Turns::default());
        let first = turns.batch();
        let order = Arc::new(Mutex::new(vec![]));
        let mut waiting = vec![];
        for i in 0..4 {
            let (mine, order) = (turns.clone(), order.clone());
            waiting.push(std::thread::spawn(move || {
                let _turn = mine.batch();
                order.lock().unwrap_or_else(|e| e.into_inner()).push(i);
            }));
            // Each one queued before the next asks.
            while turns.lock().next < i + 2 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        drop(first);
        for w in waiting {
            w.join().unwrap_or_else(|_| panic!("a writer panicked"));
        }
        assert_eq!(
            *order.lock().unwrap_or_else(|e| e.into_inner()),
            [0, 1, 2, 3]
        );
    }

    #[test]
    fn a_statement_goes_ahead_of_waiting_batches() {
        let turns = Arc::new(Turns::default());
        let first = turns.batch();
        let order = Arc::new(Mutex::new(vec![]));
        let spawn = |name: &'static str, batch: bool| {
            let (mine, order) = (turns.clone(), order.clone());
            std::thread::spawn(move || {
                let _turn = if batch {
                    mine.batch()
                } else {
                    mine.statement()
                };
                order.lock().unwrap_or_else(|e| e.into_inner()).push(name);
            })
        };
        let b = spawn("batch", true);
        while turns.lock().next < 2 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let s = spawn("statement", false);
        while turns.lock().urgent < 1 {
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(first);
        for t in [b, s] {
            t.join().unwrap_or_else(|_| panic!("a writer panicked"));
        }
        assert_eq!(
            *order.lock().unwrap_or_else(|e| e.into_inner()),
            ["statement", "batch"]
        );
    }

    #[test]
    fn one_queue_per_database() {
        let a = Turns::of(Path::new("/x/state.db"));
        assert!(Arc::ptr_eq(&a, &Turns::of(Path::new("/x/state.db"))));
        assert!(!Arc::ptr_eq(&a, &Turns::of(Path::new("/y/state.db"))));
    }
}
