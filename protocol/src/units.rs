//! Human units used on the command line and in the config file: sizes
//! (`4096`, `"64MiB"`, `"1GB"`), durations (`"30s"`, `"15m"`, `"6h"`, `"30d"`)
//! and rates (`"50MiB/s"`). Errors say which forms are accepted.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

const SIZE_FORMS: &str =
    "a byte count like 4096 or a size like \"512KiB\", \"64MiB\", \"1GB\" (B, K/KB, KiB, M/MB, MiB, G/GB, GiB, T/TB, TiB)";
const DURATION_FORMS: &str =
    "a duration like \"500ms\", \"30s\", \"15m\", \"6h\", \"30d\" or \"2w\"";
const RATE_FORMS: &str =
    "a rate like \"50MiB/s\", \"200MB/s\" or a byte count per second like 1048576";

/// A unit parse error: what was given and what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {given:?}: expected {forms}")]
pub struct UnitError {
    what: &'static str,
    given: String,
    forms: &'static str,
}

fn err(what: &'static str, given: &str, forms: &'static str) -> UnitError {
    UnitError {
        what,
        given: given.to_string(),
        forms,
    }
}

/// A size in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

/// A rate in bytes per second (> 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rate(pub u64);

/// A duration with human parsing and printing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct HumanDuration(pub Duration);

fn split_number(s: &str) -> Option<(f64, &str)> {
    let s = s.trim();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(s.len());
    if end == 0 {
        return None;
    }
    let num: String = s[..end].chars().filter(|&c| c != '_').collect();
    let n: f64 = num.parse().ok()?;
    if !n.is_finite() || n < 0.0 {
        return None;
    }
    Some((n, s[end..].trim()))
}

fn size_multiplier(unit: &str) -> Option<u64> {
    Some(match unit {
        "" | "B" | "b" => 1,
        "K" | "KB" | "k" | "kB" => 1000,
        "KiB" | "Ki" => 1 << 10,
        "M" | "MB" => 1000 * 1000,
        "MiB" | "Mi" => 1 << 20,
        "G" | "GB" => 1000 * 1000 * 1000,
        "GiB" | "Gi" => 1 << 30,
        "T" | "TB" => 1000u64.pow(4),
        "TiB" | "Ti" => 1 << 40,
        _ => return None,
    })
}

fn parse_bytes(s: &str, what: &'static str, forms: &'static str) -> Result<u64, UnitError> {
    let (n, unit) = split_number(s).ok_or_else(|| err(what, s, forms))?;
    let mult = size_multiplier(unit).ok_or_else(|| err(what, s, forms))?;
    let v = n * mult as f64;
    if v > u64::MAX as f64 || (mult == 1 && n.fract() != 0.0) {
        return Err(err(what, s, forms));
    }
    Ok(v.round() as u64)
}

impl FromStr for ByteSize {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_bytes(s, "size", SIZE_FORMS).map(ByteSize)
    }
}

impl FromStr for Rate {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let body = t.strip_suffix("/s").unwrap_or(t);
        let v = parse_bytes(body, "rate", RATE_FORMS)?;
        if v == 0 {
            return Err(err("rate", s, RATE_FORMS));
        }
        Ok(Rate(v))
    }
}

impl FromStr for HumanDuration {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (n, unit) = split_number(s).ok_or_else(|| err("duration", s, DURATION_FORMS))?;
        let secs = match unit {
            "ms" => n / 1000.0,
            "s" | "sec" => n,
            "m" | "min" => n * 60.0,
            "h" => n * 3600.0,
            "d" => n * 86_400.0,
            "w" => n * 7.0 * 86_400.0,
            _ => return Err(err("duration", s, DURATION_FORMS)),
        };
        if secs > 1e12 {
            return Err(err("duration", s, DURATION_FORMS));
        }
        Ok(HumanDuration(Duration::from_secs_f64(secs)))
    }
}

/// `1.5 MiB`, `512 B`: binary units, three significant digits.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes} B")
    } else if v >= 100.0 {
        format!("{v:.0} {}", UNITS[i])
    } else if v >= 10.0 {
        format!("{v:.1} {}", UNITS[i])
    } else {
        format!("{v:.2} {}", UNITS[i])
    }
}

impl ByteSize {
    /// The exact size, in the largest binary unit that divides it and
    /// without a space, as a config file writes it: "256MiB", "4096".
    pub fn exact(&self) -> String {
        for (unit, len) in [
            ("TiB", 1u64 << 40),
            ("GiB", 1 << 30),
            ("MiB", 1 << 20),
            ("KiB", 1 << 10),
        ] {
            if self.0 >= len && self.0 % len == 0 {
                return format!("{}{unit}", self.0 / len);
            }
        }
        self.0.to_string()
    }
}

impl Rate {
    /// The exact rate as a config file writes it: "50MiB/s".
    pub fn exact(&self) -> String {
        format!("{}/s", ByteSize(self.0).exact())
    }
}

/// As a setting is written (exact): "64MiB". For a measured amount, see
/// [`format_size`].
impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.exact())
    }
}

/// As a setting is written (exact): "50MiB/s".
impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.exact())
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0.as_secs_f64();
        for (unit, len) in [("d", 86_400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0)] {
            if s >= len && (s / len).fract() == 0.0 {
                return write!(f, "{}{unit}", s / len);
            }
        }
        write!(f, "{}ms", self.0.as_millis())
    }
}

struct UnitVisitor<T>(&'static str, std::marker::PhantomData<T>);

impl<T> Visitor<'_> for UnitVisitor<T>
where
    T: FromStr<Err = UnitError> + From<u64>,
{
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        v.parse().map_err(|e: UnitError| E::custom(e))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        u64::try_from(v)
            .map(T::from)
            .map_err(|_| E::custom(format!("{v} is negative: expected {}", self.0)))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        Ok(T::from(v))
    }
}

impl From<u64> for ByteSize {
    fn from(v: u64) -> Self {
        ByteSize(v)
    }
}
impl From<u64> for Rate {
    fn from(v: u64) -> Self {
        Rate(v.max(1))
    }
}
impl From<u64> for HumanDuration {
    fn from(v: u64) -> Self {
        HumanDuration(Duration::from_secs(v))
    }
}

macro_rules! serde_unit {
    ($t:ty, $forms:expr) => {
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_any(UnitVisitor::<$t>($forms, std::marker::PhantomData))
            }
        }
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
    };
}
serde_unit!(ByteSize, SIZE_FORMS);
serde_unit!(Rate, RATE_FORMS);
serde_unit!(HumanDuration, DURATION_FORMS);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!("4096".parse::<ByteSize>(), Ok(ByteSize(4096)));
        assert_eq!("64MiB".parse::<ByteSize>(), Ok(ByteSize(64 << 20)));
        assert_eq!("1GB".parse::<ByteSize>(), Ok(ByteSize(1_000_000_000)));
        assert_eq!("1.5 KiB".parse::<ByteSize>(), Ok(ByteSize(1536)));
        for bad in ["", "MiB", "-1", "12 parsecs", "1.5", "nan"] {
            let e = bad.parse::<ByteSize>().unwrap_err();
            assert!(e.to_string().contains("64MiB"), "{e}");
        }
    }

    #[test]
    fn rates() {
        assert_eq!("50MiB/s".parse::<Rate>(), Ok(Rate(50 << 20)));
        assert_eq!("1048576".parse::<Rate>(), Ok(Rate(1 << 20)));
        assert!("0/s".parse::<Rate>().is_err());
        assert!("fast"
            .parse::<Rate>()
            .unwrap_err()
            .to_string()
            .contains("50MiB/s"));
    }

    #[test]
    fn durations() {
        assert_eq!(
            "30s".parse::<HumanDuration>().unwrap().0,
            Duration::from_secs(30)
        );
        assert_eq!(
            "15m".parse::<HumanDuration>().unwrap().0,
            Duration::from_secs(900)
        );
        assert_eq!(
            "6h".parse::<HumanDuration>().unwrap().0,
            Duration::from_secs(21_600)
        );
        assert_eq!(
            "30d".parse::<HumanDuration>().unwrap().0,
            Duration::from_secs(2_592_000)
        );
        assert!("30 fortnights".parse::<HumanDuration>().is_err());
        assert_eq!(
            HumanDuration(Duration::from_secs(2_592_000)).to_string(),
            "30d"
        );
    }

    #[test]
    fn formatting() {
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size(1536), "1.50 KiB");
        assert_eq!(format_size(64 << 20), "64.0 MiB");
        assert_eq!(Rate(50 << 20).to_string(), "50MiB/s");
        assert_eq!(ByteSize(1536).to_string(), "1536");
        assert_eq!(ByteSize(3 << 30).to_string(), "3GiB");
        for b in [1u64, 1536, 4096, 64 << 20, (1 << 40) + 4096] {
            assert_eq!(ByteSize(b).to_string().parse::<ByteSize>(), Ok(ByteSize(b)));
        }
    }

    #[test]
    fn toml_accepts_numbers_and_strings() {
        #[derive(Deserialize)]
        struct T {
            a: ByteSize,
            b: Rate,
            c: HumanDuration,
        }
        let t: T = toml::from_str("a = 4096\nb = \"50MiB/s\"\nc = \"1h\"").unwrap();
        assert_eq!((t.a.0, t.b.0, t.c.0.as_secs()), (4096, 50 << 20, 3600));
        let e = toml::from_str::<T>("a = \"lots\"\nb = 1\nc = 1")
            .err()
            .unwrap();
        assert!(e.to_string().contains("expected a byte count"), "{e}");
    }
}
