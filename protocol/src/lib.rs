//! The control protocol between `refreshctl` and the daemon, and the
//! vocabulary its replies carry. One JSON object per line each way, over a
//! Unix socket; every request and response carries `"v": 1`, and a daemon
//! refuses versions it does not know. Fields are only ever added, with
//! defaults, so an older daemon's answer still reads.
//!
//! This crate has no I/O, no io_uring, no SQLite and no etcd: `refreshctl`
//! is built from it alone.
//!
//! - [`request`], [`response`], [`replies`]: the messages; [`ask`]: each
//!   verb with its reply type, for both sides.
//! - [`health`], [`state`], [`sample`], [`plan`], [`drive`], [`fsid`]:
//!   what the replies talk about.
//! - [`units`], [`pathtext`], [`show`]: sizes and rates, paths as text,
//!   and the tables both commands print.

pub mod ask;
pub mod drive;
pub mod forecast;
pub mod fsid;
pub mod health;
pub mod pathtext;
pub mod plan;
pub mod replies;
pub mod request;
pub mod response;
pub mod sample;
pub mod show;
pub mod state;
pub mod units;

pub use request::{parse_request, Request, RequestError, Verb, DEFAULT_SOCKET, MAX_LINE, VERSION};
pub use response::Response;
