//! The daemon's configuration: TOML → raw values with their positions →
//! a validated [`Config`]. Validation reports every problem at once, each
//! with `file:line:col`; unknown keys are errors.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use toml::de::{DeTable, DeValue, ValueDeserializer};
use toml::Spanned;

use crate::units::{ByteSize, HumanDuration, Rate};

pub const DEFAULT_PATH: &str = "/etc/refreshd/refreshd.toml";

pub mod coordination;
pub mod trees;

pub use crate::engine::types::{IoPriority, Strategy, YieldMode};

/// Local-time maintenance windows, minutes since midnight, `[start, end)`.
/// A window whose end is before its start wraps past midnight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Windows(pub Vec<(u16, u16)>);

impl Windows {
    pub fn always() -> Windows {
        Windows(vec![(0, 24 * 60)])
    }

    /// Whether `minute` (since local midnight) is inside a window.
    pub fn contains(&self, minute: u16) -> bool {
        self.0.iter().any(|&(s, e)| {
            if s <= e {
                (s..e).contains(&minute)
            } else {
                minute >= s || minute < e
            }
        })
    }
}

impl FromStr for Windows {
    type Err = String;
    fn from_str(s: &str) -> Result<Windows, String> {
        let bad = || {
            format!(
                "invalid window {s:?}: expected \"HH:MM-HH:MM\" in local time, several separated by commas (e.g. \"22:00-06:00, 12:00-13:00\")"
            )
        };
        let hm = |t: &str| -> Option<u16> {
            let (h, m) = t.trim().split_once(':')?;
            let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
            (m < 60 && (h < 24 || (h == 24 && m == 0))).then_some(h * 60 + m)
        };
        let mut out = vec![];
        for part in s.split(',') {
            let (a, b) = part.split_once('-').ok_or_else(bad)?;
            let (a, b) = (hm(a).ok_or_else(bad)?, hm(b).ok_or_else(bad)?);
            if a == b {
                return Err(format!("invalid window {part:?}: it is empty"));
            }
            out.push((a, b));
        }
        Ok(Windows(out))
    }
}

impl fmt::Display for Windows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hm = |m: u16| format!("{:02}:{:02}", m / 60, m % 60);
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|&(a, b)| format!("{}-{}", hm(a), hm(b)))
            .collect();
        f.write_str(&parts.join(","))
    }
}

impl Serialize for Windows {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Windows {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Windows, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Settings that `[defaults]` sets and each `[[paths]]` entry may override.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Settings {
    pub stale_after: Duration,
    pub scan_interval: Duration,
    pub sample_interval: Duration,
    pub sample_bytes: u64,
    pub min_throughput: u64,
    pub min_ratio: f64,
    pub rate: u64,
    pub min_interval: Duration,
    pub window: Windows,
    pub strategy: Strategy,
    /// Most bytes refreshed per drive per day; `None`: unlimited.
    pub daily_budget: Option<u64>,
    /// Free space that must stay free on the filesystem (watermark).
    pub min_free: u64,
    /// What fresh data reads at on this drive, declared by the operator:
    /// the reference of last resort when no canary can be written and the
    /// drive has no recorded baseline.
    pub expected_throughput: Option<u64>,
    /// Yield to other I/O on the drive.
    pub yield_mode: YieldMode,
    /// The refresh never goes slower than this while yielding.
    pub yield_floor: u64,
    /// Priority of refresh requests.
    pub io_priority: IoPriority,
}

const DAY: u64 = 86_400;

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            stale_after: Duration::from_secs(30 * DAY),
            scan_interval: Duration::from_secs(3600),
            sample_interval: Duration::from_secs(6 * 3600),
            sample_bytes: 256 << 20,
            min_throughput: 100 << 20,
            min_ratio: 0.5,
            rate: 50 << 20,
            min_interval: Duration::from_secs(30 * DAY),
            window: Windows::always(),
            strategy: Strategy::Auto,
            daily_budget: None,
            min_free: 1 << 30,
            expected_throughput: None,
            yield_mode: YieldMode::Auto,
            yield_floor: crate::engine::types::DEFAULT_FLOOR,
            io_priority: IoPriority::Idle,
        }
    }
}

/// One configured tree.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathConfig {
    pub path: PathBuf,
    pub settings: Settings,
    /// Its fleet group, when not `[coordination]`'s `group`.
    pub group: Option<String>,
    /// Line and column of `path` in the file (for messages).
    #[serde(skip)]
    pub at: (usize, usize),
}

/// The validated configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    /// The file it came from (for messages and SIGHUP).
    pub source: Option<PathBuf>,
    pub state_dir: PathBuf,
    pub control_socket: PathBuf,
    pub metrics_listen: String,
    /// Group (name) whose members may use the read-only control verbs.
    pub control_group: Option<String>,
    /// Drives refreshed at the same time.
    pub max_active_drives: usize,
    /// Drives behind one controller (HBA, NVMe controller) refreshed at the
    /// same time; `None`: only `max_active_drives` bounds them.
    pub max_active_per_controller: Option<usize>,
    /// Refreshes coordinated across hosts through etcd (`None`: alone).
    pub coordination: Option<coordination::Coordination>,
    pub defaults: Settings,
    pub paths: Vec<PathConfig>,
    /// Line and column of `state_dir` in the file (1:1 when not set).
    #[serde(skip)]
    pub state_dir_at: (usize, usize),
}

impl Default for Config {
    fn default() -> Config {
        Config {
            source: None,
            state_dir: "/var/lib/refreshd".into(),
            control_socket: "/run/refreshd/control.sock".into(),
            metrics_listen: "127.0.0.1:9964".into(),
            control_group: None,
            max_active_drives: 1,
            max_active_per_controller: None,
            coordination: None,
            defaults: Settings::default(),
            paths: vec![],
            state_dir_at: (1, 1),
        }
    }
}

/// One problem in a config file, with its position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub file: String,
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.line, self.col, self.message
        )
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

/// Reads and validates `path`.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        problems: vec![Problem {
            file: name.clone(),
            line: 0,
            col: 0,
            message: format!("cannot read the config file: {e}"),
        }],
    })?;
    let mut cfg = parse(&text, &name)?;
    cfg.source = Some(path.to_path_buf());
    Ok(cfg)
}

/// Validates config text; `file` names it in messages.
pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
    let mut p = Parser {
        text,
        file,
        problems: vec![],
    };
    let (root, errors) = DeTable::parse_recoverable(text);
    for e in errors {
        let span = e.span().unwrap_or(0..0);
        p.problem(span, e.message().to_string());
    }
    // Syntax errors first: what follows from them may be noise.
    let syntax = p.problems.len();
    let cfg = p.config(root.get_ref());
    if p.problems.is_empty() {
        Ok(cfg)
    } else {
        p.problems[syntax..].sort_by_key(|q| (q.line, q.col));
        Err(ConfigError {
            problems: p.problems,
        })
    }
}

type Value<'i> = Spanned<DeValue<'i>>;

struct Parser<'a> {
    text: &'a str,
    file: &'a str,
    problems: Vec<Problem>,
}

const TOP_KEYS: &[&str] = &[
    "state_dir",
    "control_socket",
    "metrics_listen",
    "control_group",
    "max_active_drives",
    "max_active_per_controller",
    "coordination",
    "defaults",
    "paths",
];
const SETTING_KEYS: &[&str] = &[
    "stale_after",
    "scan_interval",
    "sample_interval",
    "sample_bytes",
    "min_throughput",
    "min_ratio",
    "rate",
    "min_interval",
    "window",
    "strategy",
    "daily_budget",
    "min_free",
    "expected_throughput",
    "yield",
    "yield_floor",
    "io_priority",
];

impl Parser<'_> {
    fn line_col(&self, offset: usize) -> (usize, usize) {
        let at = offset.min(self.text.len());
        let before = &self.text[..at];
        let line = before.matches('\n').count() + 1;
        let col = before.rfind('\n').map_or(at, |n| at - n - 1) + 1;
        (line, col)
    }

    fn problem(&mut self, span: Range<usize>, message: String) {
        let (line, col) = self.line_col(span.start);
        self.problems.push(Problem {
            file: self.file.to_string(),
            line,
            col,
            message,
        });
    }

    fn value<T: DeserializeOwned>(&mut self, key: &str, v: &Value<'_>) -> Option<T> {
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

    fn unknown(&mut self, key: &Spanned<impl AsRef<str>>, section: &str, known: &[&str]) {
        self.problem(
            key.span(),
            format!(
                "unknown key `{}`{section}; expected one of: {}",
                key.get_ref().as_ref(),
                known.join(", ")
            ),
        );
    }

    fn config(&mut self, root: &DeTable<'_>) -> Config {
        let mut cfg = Config::default();
        let mut raw_paths = None;
        // Defaults first: path entries override them.
        if let Some((_, v)) = root
            .iter()
            .find(|(k, _)| k.get_ref().as_ref() == "defaults")
        {
            match v.get_ref().as_table() {
                Some(t) => self.settings(t, &mut cfg.defaults, " in [defaults]"),
                None => self.problem(v.span(), "`defaults` must be a table".into()),
            }
        }
        for (k, v) in root.iter() {
            let key = k.get_ref().as_ref();
            match key {
                "state_dir" => {
                    if let Some(p) = self.abs_path(key, v) {
                        cfg.state_dir = p;
                        cfg.state_dir_at = self.line_col(v.span().start);
                    }
                }
                "control_socket" => {
                    if let Some(p) = self.abs_path(key, v) {
                        cfg.control_socket = p;
                    }
                }
                "metrics_listen" => {
                    if let Some(s) = self.value::<String>(key, v) {
                        if s.is_empty() || s.parse::<std::net::SocketAddr>().is_ok() {
                            cfg.metrics_listen = s;
                        } else {
                            self.problem(
                                v.span(),
                                format!("`metrics_listen`: {s:?} is not an address like \"127.0.0.1:9964\" or \"[::1]:9964\" (\"\" turns metrics off)"),
                            );
                        }
                    }
                }
                "control_group" => cfg.control_group = self.value(key, v),
                "max_active_drives" => {
                    if let Some(n) = self.value::<i64>(key, v) {
                        match usize::try_from(n) {
                            Ok(n) if n >= 1 => cfg.max_active_drives = n,
                            _ => self
                                .problem(v.span(), "`max_active_drives` must be at least 1".into()),
                        }
                    }
                }
                "max_active_per_controller" => {
                    if let Some(n) = self.value::<i64>(key, v) {
                        match usize::try_from(n) {
                            Ok(n) if n >= 1 => cfg.max_active_per_controller = Some(n),
                            _ => self.problem(
                                v.span(),
                                "`max_active_per_controller` must be at least 1".into(),
                            ),
                        }
                    }
                }
                "coordination" => cfg.coordination = self.coordination(v),
                "defaults" => {}
                "paths" => raw_paths = Some(v),
                _ => self.unknown(k, "", TOP_KEYS),
            }
        }
        let has_coordination = root
            .iter()
            .any(|(k, _)| k.get_ref().as_ref() == "coordination");
        let Some(v) = raw_paths else {
            self.problem(
                root.iter()
                    .next_back()
                    .map_or(0..0, |(_, v)| v.span().end..v.span().end),
                "no [[paths]] entry: at least one tree to watch must be configured".into(),
            );
            return cfg;
        };
        let Some(entries) = v.get_ref().as_array() else {
            self.problem(
                v.span(),
                "`paths` must be an array of tables: [[paths]]".into(),
            );
            return cfg;
        };
        for entry in entries.iter() {
            let Some(t) = entry.get_ref().as_table() else {
                self.problem(
                    entry.span(),
                    "each `paths` entry must be a table with `path`".into(),
                );
                continue;
            };
            let mut settings = cfg.defaults.clone();
            let mut path = None;
            let mut group = None;
            for (k, v) in t.iter() {
                match k.get_ref().as_ref() {
                    "path" => path = self.abs_path("path", v).map(|p| (p, v.span())),
                    "group" => group = self.path_group(v, has_coordination),
                    _ => {}
                }
            }
            let rest: DeTable<'_> = t
                .iter()
                .filter(|(k, _)| !matches!(k.get_ref().as_ref(), "path" | "group"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            self.settings(&rest, &mut settings, " in [[paths]]");
            match path {
                Some((p, span)) => {
                    if let Some(other) = cfg
                        .paths
                        .iter()
                        .find(|o| p.starts_with(&o.path) || o.path.starts_with(&p))
                    {
                        let msg = format!(
                            "path {} overlaps {} (each tree may be configured once)",
                            p.display(),
                            other.path.display()
                        );
                        self.problem(span, msg);
                    } else {
                        let at = self.line_col(span.start);
                        cfg.paths.push(PathConfig {
                            path: p,
                            settings,
                            group,
                            at,
                        });
                    }
                }
                None if !t.iter().any(|(k, _)| k.get_ref().as_ref() == "path") => {
                    self.problem(entry.span(), "[[paths]] entry without `path`".into())
                }
                None => {}
            }
        }
        cfg
    }

    fn abs_path(&mut self, key: &str, v: &Value<'_>) -> Option<PathBuf> {
        let s: String = self.value(key, v)?;
        let p = PathBuf::from(&s);
        if s.contains('\0') || !p.is_absolute() {
            self.problem(v.span(), format!("`{key}`: {s:?} must be an absolute path"));
            return None;
        }
        if p.components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            self.problem(v.span(), format!("`{key}`: {s:?} must not contain `..`"));
            return None;
        }
        Some(p)
    }

    fn settings(&mut self, t: &DeTable<'_>, s: &mut Settings, section: &str) {
        for (k, v) in t.iter() {
            let key = k.get_ref().as_ref();
            let dur = |p: &mut Self| p.value::<HumanDuration>(key, v).map(|d| d.0);
            match key {
                "stale_after" => set(&mut s.stale_after, dur(self)),
                "scan_interval" => set(&mut s.scan_interval, self.positive_duration(key, v)),
                "sample_interval" => set(&mut s.sample_interval, self.positive_duration(key, v)),
                "min_interval" => set(&mut s.min_interval, dur(self)),
                "sample_bytes" => {
                    if let Some(b) = self.value::<ByteSize>(key, v) {
                        if b.0 < 1 << 20 {
                            self.problem(v.span(), "`sample_bytes` must be at least 1MiB".into());
                        } else {
                            s.sample_bytes = b.0;
                        }
                    }
                }
                "min_throughput" => set(
                    &mut s.min_throughput,
                    self.value::<Rate>(key, v).map(|r| r.0),
                ),
                "rate" => set(&mut s.rate, self.value::<Rate>(key, v).map(|r| r.0)),
                "min_ratio" => {
                    if let Some(r) = self.value::<f64>(key, v) {
                        if (0.0..=1.0).contains(&r) {
                            s.min_ratio = r;
                        } else {
                            self.problem(
                                v.span(),
                                format!("`min_ratio` must be between 0 and 1, not {r}"),
                            );
                        }
                    }
                }
                "window" => set(&mut s.window, self.value(key, v)),
                "strategy" => set(&mut s.strategy, self.value(key, v)),
                "yield" => set(&mut s.yield_mode, self.value(key, v)),
                "yield_floor" => set(&mut s.yield_floor, self.value::<Rate>(key, v).map(|r| r.0)),
                "io_priority" => set(&mut s.io_priority, self.value(key, v)),
                "daily_budget" => {
                    if let Some(b) = self.value::<ByteSize>(key, v) {
                        s.daily_budget = Some(b.0);
                    }
                }
                "min_free" => set(&mut s.min_free, self.value::<ByteSize>(key, v).map(|b| b.0)),
                "expected_throughput" => {
                    if let Some(r) = self.value::<Rate>(key, v) {
                        s.expected_throughput = Some(r.0);
                    }
                }
                _ => self.unknown(k, section, SETTING_KEYS),
            }
        }
    }

    fn positive_duration(&mut self, key: &str, v: &Value<'_>) -> Option<Duration> {
        let d = self.value::<HumanDuration>(key, v)?.0;
        if d < Duration::from_secs(1) {
            self.problem(v.span(), format!("`{key}` must be at least 1s"));
            return None;
        }
        Some(d)
    }
}

fn set<T>(slot: &mut T, v: Option<T>) {
    if let Some(v) = v {
        *slot = v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(text: &str) -> Vec<String> {
        parse(text, "t.toml")
            .expect_err("should be rejected")
            .problems
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn minimal_config_gets_defaults() {
        let c = parse("[[paths]]\npath = \"/srv/index\"\n", "t.toml").expect("valid");
        assert_eq!(c.paths.len(), 1);
        assert_eq!(c.paths[0].settings, Settings::default());
        assert_eq!(c.state_dir, PathBuf::from("/var/lib/refreshd"));
    }

    #[test]
    fn path_entries_override_defaults() {
        let c = parse(
            "[defaults]\nrate = \"10MiB/s\"\nstale_after = \"60d\"\n[[paths]]\npath = \"/a\"\n[[paths]]\npath = \"/b\"\nrate = \"1MiB/s\"\n",
            "t.toml",
        )
        .expect("valid");
        assert_eq!(c.paths[0].settings.rate, 10 << 20);
        assert_eq!(c.paths[1].settings.rate, 1 << 20);
        assert_eq!(
            c.paths[1].settings.stale_after,
            Duration::from_secs(60 * DAY)
        );
    }

    #[test]
    fn every_problem_is_reported_with_its_position() {
        let p = problems(
            "state_dir = \"relative\"\nbogus = 1\n[defaults]\nrate = \"fast\"\nmin_ratio = 3.0\n[[paths]]\npath = \"/a\"\nwindow = \"25:00-26:00\"\n",
        );
        assert_eq!(p.len(), 5, "{p:#?}");
        assert!(p[0].starts_with("t.toml:1:13: `state_dir`"), "{}", p[0]);
        assert!(
            p[1].starts_with("t.toml:2:1: unknown key `bogus`"),
            "{}",
            p[1]
        );
        assert!(
            p[2].starts_with("t.toml:4:8: `rate`") && p[2].contains("50MiB/s"),
            "{}",
            p[2]
        );
        assert!(p[3].starts_with("t.toml:5:13: `min_ratio`"), "{}", p[3]);
        assert!(p[4].starts_with("t.toml:8:10: `window`"), "{}", p[4]);
    }

    #[test]
    fn syntax_errors_have_positions() {
        let p = problems("[[paths]]\npath = \"/a\"\nrate = \n");
        assert!(p[0].starts_with("t.toml:3:"), "{p:?}");
    }

    #[test]
    fn paths_are_required_absolute_and_disjoint() {
        assert!(problems("")[0].contains("no [[paths]]"));
        let p = problems("[[paths]]\npath = \"/srv\"\n[[paths]]\npath = \"/srv/a\"\n[[paths]]\npath = \"/x/../y\"\n");
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].contains("overlaps /srv"));
        assert!(p[1].contains("`..`"));
    }

    #[test]
    fn shipped_example_parses_to_the_defaults() {
        let text = include_str!("../config/refreshd.toml");
        let c = parse(text, "config/refreshd.toml").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.paths.len(), 1);
        assert_eq!(
            c.defaults,
            Settings::default(),
            "the example documents the defaults"
        );
        let d = Config::default();
        assert_eq!(
            (
                &c.state_dir,
                &c.control_socket,
                &c.metrics_listen,
                c.max_active_drives
            ),
            (
                &d.state_dir,
                &d.control_socket,
                &d.metrics_listen,
                d.max_active_drives
            )
        );
        // Every key is in the example (commented or not).
        for key in TOP_KEYS
            .iter()
            .chain(SETTING_KEYS)
            .chain(coordination::KEYS)
            .chain(&["group"])
        {
            assert!(
                text.contains(&format!("{key} ="))
                    || text.contains(&format!("[{key}]"))
                    || text.contains(&format!("[[{key}]]")),
                "{key} undocumented"
            );
        }
    }

    #[test]
    fn windows_parse_and_wrap() {
        let w: Windows = "22:00-06:00, 12:00-13:00".parse().expect("valid");
        assert!(w.contains(23 * 60) && w.contains(5 * 60) && w.contains(12 * 60 + 30));
        assert!(!w.contains(6 * 60) && !w.contains(13 * 60) && !w.contains(20 * 60));
        assert!(Windows::always().contains(0) && Windows::always().contains(1439));
        assert!("10:00".parse::<Windows>().is_err());
        assert!("10:00-10:00".parse::<Windows>().is_err());
        assert_eq!(w.to_string(), "22:00-06:00,12:00-13:00");
    }

    #[test]
    fn a_syntax_error_is_reported_first() {
        // A bad value on line 2, a broken table header on line 4.
        let p = problems("[defaults]\nrate = \"fast\"\n\n[[paths]\npath = \"/srv\"\n");
        assert!(p.len() >= 2, "{p:?}");
        assert!(p[0].starts_with("t.toml:4:"), "syntax first: {p:?}");
        assert!(p.iter().any(|x| x.starts_with("t.toml:2:")), "{p:?}");
    }
}
