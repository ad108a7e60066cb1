//! How fast the refresh goes: a byte rate ([`throttle`]) and the pacer
//! that lowers the rate, the depth and the request size while the
//! application uses the drive ([`pace`]).

pub mod pace;
pub mod throttle;
