//! Paths for output: a path is bytes (a name may hold a newline, a quote,
//! an escape sequence or invalid UTF-8), and each medium gets it from
//! exactly one function here:
//!
//! - [`text`]: tables, human lines, error messages — printable UTF-8 as it
//!   is; control characters, invalid UTF-8, bidirectional overrides, `\`
//!   and `"` as `\xNN`. Nothing can start a line, colour a terminal or
//!   close a quote. The form is reversible ([`parse`]).
//! - [`Log`]: a log field — the text form in double quotes, so a name
//!   with spaces or `key=value` stays one field.
//! - JSON (`#[serde(with = "crate::pathtext::json")]`): the text form as a
//!   string, so every path serializes (never an error, `null` or a panic)
//!   and reads back to the same bytes.
//!
//! Metrics carry no file names.

use std::ffi::OsStr;
use std::fmt;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// Characters that reorder text on a terminal (bidirectional controls).
fn bidi(c: char) -> bool {
    matches!(c, '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

fn escape(c: char) -> bool {
    c.is_control() || bidi(c) || c == '\\' || c == '"'
}

/// The text form of a path (see the module doc).
pub fn text(p: &Path) -> String {
    let mut out = String::with_capacity(p.as_os_str().len());
    for chunk in p.as_os_str().as_bytes().utf8_chunks() {
        for c in chunk.valid().chars() {
            if escape(c) {
                let mut b = [0u8; 4];
                for byte in c.encode_utf8(&mut b).bytes() {
                    out.push_str(&format!("\\x{byte:02x}"));
                }
            } else {
                out.push(c);
            }
        }
        for byte in chunk.invalid() {
            out.push_str(&format!("\\x{byte:02x}"));
        }
    }
    out
}

/// The path a text form names (`None` for a malformed escape).
pub fn parse(s: &str) -> Option<PathBuf> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            if b.get(i + 1) != Some(&b'x') {
                return None;
            }
            let hex = std::str::from_utf8(b.get(i + 2..i + 4)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(PathBuf::from(std::ffi::OsString::from_vec(out)))
}

/// A path as a log field: `"<text form>"`.
#[derive(Debug, Clone, Copy)]
pub struct Log<'a>(pub &'a Path);

impl fmt::Display for Log<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{}\"", text(self.0))
    }
}

/// A path in a message or table: the text form.
#[derive(Debug, Clone, Copy)]
pub struct Shown<'a>(pub &'a Path);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&text(self.0))
    }
}

/// `#[serde(with = "crate::pathtext::json")]` for a `PathBuf` field.
pub mod json {
    use super::*;

    pub fn serialize<S: serde::Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&text(p))
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
        let s = <String as serde::Deserialize>::deserialize(d)?;
        parse(&s).ok_or_else(|| serde::de::Error::custom(format!("malformed path {s:?}")))
    }
}

/// `#[serde(with = "crate::pathtext::json_vec")]` for a `Vec<PathBuf>`.
pub mod json_vec {
    use super::*;
    use serde::ser::SerializeSeq;

    pub fn serialize<S: serde::Serializer>(v: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(v.len()))?;
        for p in v {
            seq.serialize_element(&text(p))?;
        }
        seq.end()
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<PathBuf>, D::Error> {
        let v = <Vec<String> as serde::Deserialize>::deserialize(d)?;
        v.iter()
            .map(|s| {
                parse(s).ok_or_else(|| serde::de::Error::custom(format!("malformed path {s:?}")))
            })
            .collect()
    }
}

/// `#[serde(with = "crate::pathtext::json_opt")]` for an `Option<PathBuf>`.
pub mod json_opt {
    use super::*;

    pub fn serialize<S: serde::Serializer>(p: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
        match p {
            Some(p) => s.serialize_some(&text(p)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<PathBuf>, D::Error> {
        let s = <Option<String> as serde::Deserialize>::deserialize(d)?;
        s.map(|s| {
            parse(&s).ok_or_else(|| serde::de::Error::custom(format!("malformed path {s:?}")))
        })
        .transpose()
    }
}

/// A path from bytes (tests, tools).
pub fn from_bytes(b: &[u8]) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hostile_names_stay_in_their_field() {
        let p = from_bytes(b"/srv/a\nERROR refreshd: FORGED \"x\" \x1b[31m\xff\xe2\x80\xae.idx");
        let t = text(&p);
        assert!(
            !t.contains('\n') && !t.contains('\x1b') && !t.contains('"'),
            "{t}"
        );
        assert!(!t.contains('\u{202e}'), "{t}");
        assert_eq!(
            t,
            "/srv/a\\x0aERROR refreshd: FORGED \\x22x\\x22 \\x1b[31m\\xff\\xe2\\x80\\xae.idx"
        );
        assert_eq!(Log(&p).to_string().matches('"').count(), 2);
        assert_eq!(text(Path::new("/srv/a b/ümlaut")), "/srv/a b/ümlaut");
        assert_eq!(text(Path::new("/srv/back\\slash")), "/srv/back\\x5cslash");
    }

    proptest! {
        #[test]
        fn every_byte_name_round_trips(name in proptest::collection::vec(1u8..=255, 1..300)) {
            let p = from_bytes(&name);
            let t = text(&p);
            prop_assert!(!t.chars().any(|c| c.is_control()));
            prop_assert_eq!(parse(&t), Some(p.clone()));
            let json = serde_json::to_string(&Wrap { p: p.clone() }).expect("always serializes");
            let back: Wrap = serde_json::from_str(&json).expect("reads back");
            prop_assert_eq!(back.p, p);
        }
    }

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Wrap {
        #[serde(with = "json")]
        p: PathBuf,
    }
}
