//! Integration tests: one binary, modules by area. Tests named
//! `privileged_*` need root and loop devices; they skip with a printed
//! reason elsewhere and fail when REFRESHD_REQUIRE_PRIVILEGED_TESTS=1.
#![allow(clippy::unwrap_used)]

mod age;
mod architecture;
mod block_reads;
mod busy;
mod cli;
mod clock;
mod controllers;
mod daemon;
mod daemon_harness;
mod daemon_identity;
mod daemon_judge;
mod daemon_now;
mod daemon_recovery;
mod drives;
#[cfg(feature = "fleet")]
mod fleet;
#[cfg(feature = "fleet")]
mod fleet_harness;
mod forecast;
mod guards;
mod helpers;
mod home;
mod io_errors;
mod latency_judge;
mod layout;
mod lease;
mod limits;
mod metadata;
mod names;
mod pacing;
mod packaging;
mod read_errors;
mod readme;
mod reboot;
mod recovery;
mod relocate;
mod relocate_cache;
mod scale;
mod skips;
mod start;
mod stress;
mod survey;
mod times;
mod truth;
mod upgrade;
