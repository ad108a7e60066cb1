//! Whether anyone else changed a file's times or attributes while refreshd
//! wrote it, and the times refreshd's own writes left.
//!
//! A write lease keeps other writers out, but not `utimensat`, `chmod`,
//! `chown` or xattr changes: they need no open file. Times are put back
//! only over refreshd's own change, so such a change must be seen. What
//! tells it, while the file is under refreshd's lease:
//!
//! 1. `IN_ATTRIB` on the inode: chmod, chown, xattrs, both times set.
//!    refreshd's writes never raise it.
//! 2. `IN_MODIFY` (what `touch -m` raises, as a write does) while no
//!    write of refreshd's was submitted since its last look (a write's
//!    event is queued before its completion is reaped): not its own.
//! 3. Times that moved with mtime ≠ ctime (or at all before refreshd's
//!    first write: the watch starts from the times refreshd took the file
//!    with, before the watch was set): a write sets both to one value;
//!    an explicit mtime (`touch -m -d`, which raises `IN_MODIFY` alone)
//!    does not — but two of refreshd's own can leave them differing, or
//!    be seen half done: an mtime its writes since the last look could
//!    have left is not judged ([`AttrWatch::own_writes_may_have_left`]).
//!
//! A change seen before refreshd's next write (checked right before each
//! submission) is captured with the times it left: at the end those are
//! put back, over refreshd's own later writes — the file ends with the
//! times the other process gave it.
//!
//! 0. Before these: any change fanotify reports from a process other
//!    than refreshd ([`writers`]). It alone sees a change made while a
//!    write of refreshd's is in flight, before that write stores its own
//!    time over it: the two `IN_MODIFY` merge into one, and the times
//!    are the write's. The times captured then are that write's: the
//!    file keeps them, later than the other's, never the old ones.
//!
//! Residual (documented), where fanotify cannot be had: a change landing
//! while a write of refreshd's is in flight, that the write's own time
//! then covers or that leaves the times a write leaves (`touch -m`
//! without a date: mtime = ctime = now), cannot be told from that write
//! (a timestamp rule would misfire on writes io_uring runs later on its
//! workers): it is taken for refreshd's own.
//! Once seen, a change stays seen for the file: its times are left as the
//! other process made them, and the recovery record says so.
//!
//! One inotify instance per I/O thread (instances are few per user); a
//! watch per file, removed when the file is done.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};

use crate::clock::Timestamp;

mod writers;
use writers::Writers;

/// The I/O thread's inotify instance and fanotify group.
#[derive(Debug)]
pub struct Watcher {
    inotify: OwnedFd,
    writers: Option<Writers>,
}

impl Watcher {
    pub fn new() -> io::Result<Watcher> {
        Ok(Watcher {
            inotify: inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC)?,
            writers: Writers::new(),
        })
    }

    /// Starts watching the inode `file` refers to (through
    /// `/proc/self/fd`: the very inode, no name resolved again), from
    /// `taken`, its (mtime, ctime) when refreshd took it: a change between
    /// that stat and the watch is another's.
    pub fn watch<'w>(
        &'w self,
        file: BorrowedFd<'_>,
        taken: (Timestamp, Timestamp),
    ) -> io::Result<AttrWatch<'w>> {
        let mut w = self.watch_by_inotify(file, taken)?;
        w.writers = self.writers.as_ref().filter(|g| g.mark(file));
        Ok(w)
    }

    /// [`Watcher::watch`] without fanotify (rules 1–3 alone).
    fn watch_by_inotify<'w>(
        &'w self,
        file: BorrowedFd<'_>,
        taken: (Timestamp, Timestamp),
    ) -> io::Result<AttrWatch<'w>> {
        let path = format!("/proc/self/fd/{}", file.as_raw_fd());
        let wd = inotify::add_watch(
            &self.inotify,
            path.as_str(),
            WatchFlags::ATTRIB | WatchFlags::MODIFY,
        )?;
        let mut w = AttrWatch {
            inotify: self.inotify.as_fd(),
            wd,
            seen: false,
            quiet: true,
            wrote: false,
            taken,
            last: taken,
            own: None,
            theirs: None,
            foreign: 0,
            captured_at: 0,
            writers: None,
        };
        w.events(); // left over from an earlier watch with the same number
        w.seen = false;
        Ok(w)
    }
}

/// A file watched while refreshd writes it.
#[derive(Debug)]
pub struct AttrWatch<'w> {
    inotify: BorrowedFd<'w>,
    wd: i32,
    /// Another process's change was seen.
    seen: bool,
    /// No write of refreshd's submitted since its last look.
    quiet: bool,
    /// A write of refreshd's was submitted.
    wrote: bool,
    /// (mtime, ctime) when refreshd took the file.
    taken: (Timestamp, Timestamp),
    /// (mtime, ctime) at refreshd's last look or `writing`.
    last: (Timestamp, Timestamp),
    /// (mtime, ctime) as refreshd's own writes last left them.
    own: Option<(Timestamp, Timestamp)>,
    /// (atime, mtime) as another process left them, when its change was
    /// seen before refreshd wrote again.
    theirs: Option<(Timestamp, Timestamp)>,
    /// Other processes' changes seen (batches of events), and how many
    /// there were when `theirs` was captured.
    foreign: u64,
    captured_at: u64,
    /// Which process changed it (rule 0), where fanotify can be had.
    writers: Option<&'w Writers>,
}

/// What a look at the file found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Only refreshd's own writes changed it: its (mtime, ctime) now.
    Own(Timestamp, Timestamp),
    /// Another process changed its times or attributes.
    Another,
}

/// Events queued for one watch: (attribute changes, modifications).
#[derive(Debug, Default, Clone, Copy)]
struct Events {
    attrib: u64,
    modify: u64,
}

impl AttrWatch<'_> {
    /// The events queued when called (and any that arrive with them in
    /// the same reads): a writer faster than this loop cannot keep it here.
    fn events(&mut self) -> Events {
        let mut n = Events::default();
        let mut queued = rustix::io::ioctl_fionread(self.inotify).unwrap_or(1);
        let mut buf = [0u8; 4096];
        while queued > 0 {
            // WOULDBLOCK: drained; another error: nothing more can be told.
            let Ok(len) = rustix::io::read(self.inotify, &mut buf) else {
                break;
            };
            if len == 0 {
                break;
            }
            queued = queued.saturating_sub(len as u64);
            for (wd, flags) in parse_events(&buf[..len]) {
                if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                    n.attrib += 1; // something was lost: assume the worst
                } else if wd == self.wd {
                    n.attrib += u64::from(flags.contains(ReadFlags::ATTRIB));
                    n.modify += u64::from(flags.contains(ReadFlags::MODIFY));
                }
            }
        }
        n
    }

    /// Events since the last call, judged by rules 0, 1 and 2.
    fn note_events(&mut self) {
        let e = self.events();
        let anothers = self.writers.is_some_and(Writers::anothers);
        if anothers || e.attrib > 0 || (self.quiet && e.modify > 0) {
            self.seen = true;
            self.foreign += 1;
        }
    }

    /// Captures the times another process left (first change only),
    /// read again now: the times read before its events were drained can
    /// be from before the change (a change landing between the two is
    /// seen, but its times are in neither). A change after this read
    /// counts again, and then none are put back.
    fn capture(&mut self, file: BorrowedFd<'_>) {
        if self.theirs.is_none() {
            let Ok(st) = rustix::fs::fstat(file) else {
                return;
            };
            let a = Timestamp::from_stat(st.st_atime, st.st_atime_nsec);
            let m = Timestamp::from_stat(st.st_mtime, st.st_mtime_nsec);
            self.theirs = Some((a, m));
            self.captured_at = self.foreign;
        }
    }

    /// A write of refreshd's is about to be submitted: what came before
    /// it, while quiet, was another process's; a change seen now is
    /// captured with the times it left.
    pub fn writing(&mut self, file: BorrowedFd<'_>) {
        let before = self.seen;
        let now = rustix::fs::fstat(file).ok();
        self.note_events();
        if let Some(st) = now {
            let m = Timestamp::from_stat(st.st_mtime, st.st_mtime_nsec);
            let c = Timestamp::from_stat(st.st_ctime, st.st_ctime_nsec);
            if self.times_set_by_another(m, c) && !self.seen {
                self.seen = true; // rule 3
                self.foreign += 1;
            }
            self.last = (m, c);
            if self.seen && !before {
                self.capture(file);
            }
        }
        self.quiet = false;
        self.wrote = true;
    }

    /// Rule 3: the times moved from those refreshd took the file with, and
    /// since it last judged them, to a pair no write of its own leaves
    /// (mtime ≠ ctime; any pair before its first write), unless its own
    /// writes since the last look may have left them
    /// ([`AttrWatch::own_writes_may_have_left`]).
    fn times_set_by_another(&self, m: Timestamp, c: Timestamp) -> bool {
        (m, c) != self.taken
            && (m, c) != self.last
            && (m != c || !self.wrote)
            && !self.own_writes_may_have_left(m)
    }

    /// Whether an mtime ≠ ctime may be refreshd's own writes' since its
    /// last look. A write stores its time as ctime, then mtime, with
    /// nothing keeping a `stat` out: one seen half done shows the mtime
    /// as it was (1 stat in ~8,000 beside a writing thread); two whose
    /// updates run at once (io_uring's workers) can leave one's ctime and
    /// the other's mtime, in either order (84 of 20,000 concurrent pairs
    /// of O_DIRECT writes on ext4). Either way the mtime is the one seen
    /// last, or a time one of those writes took: no earlier than the ctime
    /// seen last, no later than now.
    fn own_writes_may_have_left(&self, m: Timestamp) -> bool {
        let now = Timestamp::new(crate::clock::now_secs().saturating_add(1), 0);
        !self.quiet && (m == self.last.0 || (self.last.1 <= m && m <= now))
    }

    /// The (atime, mtime) another process left, if its change was seen
    /// before refreshd wrote again and nothing but refreshd's own writes
    /// came after it: put back at the end, over those writes.
    pub fn theirs(&self) -> Option<(Timestamp, Timestamp)> {
        self.theirs.filter(|_| self.foreign == self.captured_at)
    }

    /// Whether anyone else changed the file's attributes so far.
    pub fn changed(&mut self) -> bool {
        self.note_events();
        self.seen
    }

    /// Looks at the file when no write of refreshd's is in flight. The
    /// times are read before the events, so a change landing in between
    /// is seen as one.
    pub fn look(&mut self, file: BorrowedFd<'_>) -> io::Result<Seen> {
        let st = rustix::fs::fstat(file)?;
        #[cfg(test)]
        tests::between_the_read_and_the_drain();
        let m = Timestamp::from_stat(st.st_mtime, st.st_mtime_nsec);
        let c = Timestamp::from_stat(st.st_ctime, st.st_ctime_nsec);
        let before = self.seen;
        self.note_events();
        // Judged against the writes since the last look (now reaped).
        let theirs = self.times_set_by_another(m, c);
        self.quiet = true;
        self.last = (m, c);
        let moved = (m, c) != self.taken;
        if theirs && !self.seen {
            self.seen = true; // rule 3
            self.foreign += 1;
        }
        if self.seen && !before {
            // No write of refreshd's in flight: these are theirs.
            self.capture(file);
            #[cfg(test)]
            tests::capture_from_the_first_read(self, &st);
        }
        if self.seen {
            return Ok(Seen::Another);
        }
        if moved {
            self.own = Some((m, c));
        }
        Ok(Seen::Own(m, c))
    }

    /// Whether the times may be put back now: nobody else changed the
    /// file's times or attributes, and its (mtime, ctime) are exactly
    /// what refreshd's own last write left.
    pub fn may_restore(&mut self, file: BorrowedFd<'_>) -> Result<(), &'static str> {
        let last = self.own;
        match self.look(file) {
            Err(_) => Err("its times could not be read"),
            Ok(Seen::Another) => Err("another process changed its times or attributes meanwhile"),
            Ok(Seen::Own(m, c)) if last.is_some_and(|l| l != (m, c)) => {
                self.seen = true;
                Err("its times are not what refreshd's own last write left")
            }
            Ok(Seen::Own(..)) => Ok(()),
        }
    }

    /// After refreshd put the times back (one attribute change of its
    /// own): whether another process changed them at the same moment.
    pub fn restored(&mut self) -> bool {
        let e = self.events();
        let anothers = self.writers.is_some_and(Writers::anothers);
        let others = anothers || e.attrib > 1 || e.modify > 0;
        self.seen |= others;
        others
    }
}

/// (watch, flags) of each `struct inotify_event` in `buf` (whole events:
/// the kernel never splits one across reads).
fn parse_events(buf: &[u8]) -> impl Iterator<Item = (i32, ReadFlags)> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        let head = buf.get(at..at + 16)?;
        let word = |i: usize| [head[i], head[i + 1], head[i + 2], head[i + 3]];
        let wd = i32::from_ne_bytes(word(0));
        let mask = u32::from_ne_bytes(word(4));
        let name_len = u32::from_ne_bytes(word(12)) as usize;
        at += 16 + name_len;
        Some((wd, ReadFlags::from_bits_retain(mask)))
    })
}

impl Drop for AttrWatch<'_> {
    fn drop(&mut self) {
        let _ = inotify::remove_watch(self.inotify, self.wd);
        if let Some(w) = self.writers {
            w.unmark();
        }
    }
}

#[cfg(test)]
mod tests;
