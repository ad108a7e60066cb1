//! TOML with positions: every value keeps its span, every problem is
//! reported at `file:line:col` (or at `file:` alone when it has no place in
//! the text), and all of them at once.

use std::fmt;
use std::ops::Range;

use serde::de::DeserializeOwned;
use toml::de::{DeValue, ValueDeserializer};
use toml::Spanned;

/// A value of the file with its span.
pub type Value<'i> = Spanned<DeValue<'i>>;

/// A line and a column, both from 1.
pub type Position = (usize, usize);

/// One problem in a config file, with its position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub file: String,
    /// `None`: the problem is the file as a whole (it cannot be read).
    pub at: Option<Position>,
    pub message: String,
}

impl Problem {
    pub fn line(&self) -> usize {
        self.at.map_or(0, |(l, _)| l)
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.at {
            Some((line, col)) => write!(f, "{}:{line}:{col}: {}", self.file, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

/// Every problem found in a config file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    pub problems: Vec<Problem>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self.problems.iter().map(ToString::to_string).collect();
        f.write_str(&lines.join("\n"))
    }
}

/// Collects problems while the file is read.
#[derive(Debug)]
pub struct Parser<'a> {
    text: &'a str,
    file: &'a str,
    pub problems: Vec<Problem>,
}

impl<'a> Parser<'a> {
    pub fn new(text: &'a str, file: &'a str) -> Parser<'a> {
        Parser {
            text,
            file,
            problems: vec![],
        }
    }

    /// The line and column of a byte offset; an offset at the end of a
    /// line (or of the file) names that line's last character.
    pub fn line_col(&self, offset: usize) -> Position {
        let bytes = self.text.as_bytes();
        let mut at = offset.min(bytes.len());
        let at_line_end = at == bytes.len() || bytes[at] == b'\n';
        if at_line_end && at > 0 && bytes[at - 1] != b'\n' {
            at -= 1;
        }
        while !self.text.is_char_boundary(at) {
            at -= 1;
        }
        let before = &self.text[..at];
        let line = before.matches('\n').count() + 1;
        let col = before[before.rfind('\n').map_or(0, |n| n + 1)..]
            .chars()
            .count()
            + 1;
        (line, col)
    }

    pub fn problem(&mut self, span: Range<usize>, message: String) {
        let at = self.line_col(span.start);
        self.problem_at(at, message);
    }

    pub fn problem_at(&mut self, at: Position, message: String) {
        self.problems.push(Problem {
            file: self.file.to_string(),
            at: Some(at),
            message,
        });
    }

    /// The value as a `T`, or a problem at its position.
    pub fn value<T: DeserializeOwned>(&mut self, key: &str, v: &Value<'_>) -> Option<T> {
        match T::deserialize(ValueDeserializer::from(v.clone())) {
            Ok(t) => Some(t),
            Err(e) => {
                let span = e.span().unwrap_or_else(|| v.span());
                let msg = e.message().trim().to_string();
                self.problem(span, format!("`{key}`: {msg}"));
                None
            }
        }
    }

    pub fn unknown(&mut self, key: &Spanned<impl AsRef<str>>, section: &str, known: &[&str]) {
        self.problem(
            key.span(),
            format!(
                "unknown key `{}`{section}; expected one of: {}",
                key.get_ref().as_ref(),
                known.join(", ")
            ),
        );
    }
}
