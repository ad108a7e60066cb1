//! The mechanisms of the safety contract (see docs/safety.md): each one
//! guards one way a rewrite could change what another process sees.
//!
//! - [`guard`]: opening a file only when it is what was planned (a regular
//!   file beneath its root, not a link, not another file now), and the
//!   refusals that skip it; [`target`] names it, [`meta`] is what the
//!   kernel says of it.
//! - [`lease`]: the write lease that keeps other openers out, and the
//!   bound on writes in flight under it.
//! - [`plan`]: which ranges are rewritten (data only: never holes,
//!   unwritten or shared extents) and the layout check after.
//! - [`attrwatch`]: other processes' attribute and time changes, which a
//!   lease does not stop, so their times are kept.
//! - [`journal`]: the crash journal that puts a file's times back after a
//!   kill or a power cut.
//! - [`watch`]: what the executor asks between any two steps.

pub mod attrwatch;
pub mod guard;
pub mod journal;
pub mod lease;
pub mod meta;
pub mod plan;
pub mod target;
pub mod watch;
