//! `refreshctl`, the operator's client for the refreshd daemon: its
//! command line ([`cli`]), the calls ([`client`]) and the tables ([`render`]). Built
//! from the protocol crate alone: no io_uring, SQLite or etcd.

pub mod cli;
pub mod client;
pub mod render;
