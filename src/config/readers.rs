//! How one setting's value is read and checked: each function takes the
//! key and its value and gives the typed setting, or records a problem at
//! the value's position and gives nothing (the default stays).

use std::path::PathBuf;
use std::time::Duration;

use serde::de::DeserializeOwned;

use super::parser::{Parser, Value};
use crate::units::{ByteSize, HumanDuration, Rate};

/// The signature every reader has.
pub type Reader<T> = fn(&mut Parser<'_>, &str, &Value<'_>) -> Option<T>;

/// Any value serde reads (enums, strings, lists).
pub fn value<T: DeserializeOwned>(p: &mut Parser<'_>, key: &str, v: &Value<'_>) -> Option<T> {
    p.value(key, v)
}

pub fn duration(p: &mut Parser<'_>, key: &str, v: &Value<'_>) -> Option<Duration> {
    p.value::<HumanDuration>(key, v).map(|d| d.0)
}

/// A duration of at least a second (an interval something waits).
pub fn interval(p: &mut Parser<'_>, key: &str, v: &Value<'_>) -> Option<Duration> {
    let d = duration(p, key, v)?;
    if d < Duration::from_secs(1) {
        p.problem(v.span(), format!("`{key}` must be at least 1s"));
        return None;
    }
    Some(d)
}

pub fn size(p: &mut Parser<'_>, key: &str, v: &Value<'_>) -> Option<ByteSize> {
    p.value(key, v)
}

/// A read budget: at least 1 MiB.
pub fn budget(p: &mut Parser<'_>, key: &str, v: &Value<'_>) -> Option<ByteSize> {
    let b = size(p, key, v)?;
    if b.0 < 1 << 20 {
        p.problem(v.span(), format!("`{key}` must be at least 1MiB"));
        return None;
    }
    Some(b)
}

pub fn rate(p: &mut Parser<'_>, key: &str, v: &Value<'_>) -> Option<Rate> {
    p.value(key, v)
}

/// A number between 0 and 1.
pub fn ratio(p: &mut Parser<'_>, key: &str, v: &Value<'_>) -> Option<f64> {
    let r = p.value::<f64>(key, v)?;
    if !(0.0..=1.0).contains(&r) {
        p.problem(
            v.span(),
            format!("`{key}` must be between 0 and 1, not {r}"),
        );
        return None;
    }
    Some(r)
}

/// A count of at least 1.
pub fn count(p: &mut Parser<'_>, key: &str, v: &Value<'_>) -> Option<usize> {
    let n = p.value::<i64>(key, v)?;
    match usize::try_from(n) {
        Ok(n) if n >= 1 => Some(n),
        _ => {
            p.problem(v.span(), format!("`{key}` must be at least 1, not {n}"));
            None
        }
    }
}

/// An absolute path without `..`.
pub fn abs_path(p: &mut Parser<'_>, key: &str, v: &Value<'_>) -> Option<PathBuf> {
    let s: String = p.value(key, v)?;
    let path = PathBuf::from(&s);
    if s.contains('\0') || !path.is_absolute() {
        p.problem(v.span(), format!("`{key}`: {s:?} must be an absolute path"));
        return None;
    }
    if path
        .components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        p.problem(v.span(), format!("`{key}`: {s:?} must not contain `..`"));
        return None;
    }
    Some(path)
}

/// A socket address, or "" (off).
pub fn listen_address(p: &mut Parser<'_>, key: &str, v: &Value<'_>) -> Option<String> {
    let s: String = p.value(key, v)?;
    if s.is_empty() || s.parse::<std::net::SocketAddr>().is_ok() {
        return Some(s);
    }
    p.problem(
        v.span(),
        format!("`{key}`: {s:?} is not an address like \"127.0.0.1:9964\" or \"[::1]:9964\" (\"\" turns metrics off)"),
    );
    None
}

/// A name usable in an etcd key: letters, digits, `.`, `_`, `-`.
pub fn key_safe(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// A name for etcd keys (group, daemon name).
pub fn name(p: &mut Parser<'_>, key: &str, v: &Value<'_>) -> Option<String> {
    let s: String = p.value(key, v)?;
    if key_safe(&s) {
        return Some(s);
    }
    p.problem(
        v.span(),
        format!("`{key}`: {s:?} must be 1 to 128 letters, digits, '.', '_' or '-'"),
    );
    None
}
