//! `refreshctl`, the operator's client for the refreshd daemon: its
//! command line ([`cli`]) and the calls and tables ([`client`]). Built
//! from the protocol crate alone: no io_uring, SQLite or etcd.

pub mod cli;
pub mod client;
