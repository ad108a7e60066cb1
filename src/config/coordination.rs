//! `[coordination]`: refreshes of the drives that hold copies of the same
//! data (a `group`, across hosts) take one of `max_concurrent` slots in
//! etcd first. Parsed and checked here, with positions; the daemon's side
//! is in `crate::coordination`.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use toml::de::DeTable;

use super::{set, Parser};
use crate::units::HumanDuration;

/// The validated `[coordination]` section.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Coordination {
    /// `http://host:port` of etcd members, or all `https://` with `ca_file`.
    pub etcd_endpoints: Vec<String>,
    /// Drives (on any host) that hold copies of the same data.
    pub group: String,
    /// At most this many drives of the group refresh at once.
    pub max_concurrent: usize,
    /// A dead host's slot frees itself after this (whole seconds, ≥ 3 s).
    pub lease_ttl: Duration,
    /// Key prefix in etcd (`<prefix>/<group>/queue/…`).
    pub prefix: String,
    /// This daemon's name in the group (default: the host name).
    pub name: String,
    /// etcd authentication: the user, and a file holding the password.
    pub user: Option<String>,
    pub password_file: Option<PathBuf>,
    /// TLS to etcd: the CA that signed the members' certificates, and this
    /// host's client certificate and key (for `--client-cert-auth`).
    pub ca_file: Option<PathBuf>,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// Checked before a slot is taken and between files: argv of a
    /// command that exits 0 when the cluster can spare a copy.
    pub health_command: Option<Vec<String>>,
    /// Or a URL (`http://` only) that answers 2xx when it can.
    pub health_url: Option<String>,
    /// How long the health check may take (then it failed).
    pub health_timeout: Duration,
    /// Line and column of the section, and of `etcd_endpoints` (messages).
    #[serde(skip)]
    pub at: (usize, usize),
    #[serde(skip)]
    pub endpoints_at: (usize, usize),
}

impl Default for Coordination {
    fn default() -> Coordination {
        Coordination {
            etcd_endpoints: vec![],
            group: String::new(),
            max_concurrent: 1,
            lease_ttl: Duration::from_secs(15),
            prefix: "/refreshd".into(),
            name: host_name(),
            user: None,
            password_file: None,
            ca_file: None,
            cert_file: None,
            key_file: None,
            health_command: None,
            health_url: None,
            health_timeout: Duration::from_secs(10),
            at: (1, 1),
            endpoints_at: (1, 1),
        }
    }
}

/// The kernel's host name ("localhost" if it cannot be read).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

pub(super) const KEYS: &[&str] = &[
    "etcd_endpoints",
    "group",
    "max_concurrent",
    "lease_ttl",
    "prefix",
    "name",
    "user",
    "password_file",
    "ca_file",
    "cert_file",
    "key_file",
    "health_command",
    "health_url",
    "health_timeout",
];

/// A name usable in an etcd key: letters, digits, `.`, `_`, `-`.
fn key_safe(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Why `e` is not an etcd endpoint URL, or `None`.
fn endpoint_problem(e: &str, tls: bool) -> Option<String> {
    let rest = match (e.strip_prefix("http://"), e.strip_prefix("https://")) {
        (Some(r), _) if !tls => r,
        (_, Some(r)) if tls => r,
        (Some(_), _) => {
            return Some(format!(
                "{e:?} is plain http but `ca_file` is set: every endpoint must be https://"
            ))
        }
        (_, Some(_)) => {
            return Some(format!(
                "{e:?} is https: name the CA that signed etcd's certificates in `ca_file`"
            ))
        }
        _ => return Some(format!("{e:?} must start with http:// or https://")),
    };
    let hostport = rest.trim_end_matches('/');
    match hostport.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && !hostport.contains('/') => {
            match port.parse::<u16>() {
                Ok(p) if p > 0 => None,
                _ => Some(format!("{e:?}: {port:?} is not a port")),
            }
        }
        _ => Some(format!("{e:?} must be like \"http://10.0.0.5:2379\"")),
    }
}

impl Parser<'_> {
    /// A `[[paths]]` entry's own `group` (the drives holding copies of
    /// its data, when not `[coordination]`'s).
    pub(super) fn path_group(
        &mut self,
        v: &super::Value<'_>,
        has_coordination: bool,
    ) -> Option<String> {
        let g: String = self.value("group", v)?;
        if !has_coordination {
            self.problem(
                v.span(),
                "`group` in [[paths]] needs a [coordination] section (etcd endpoints)".into(),
            );
            return None;
        }
        if !key_safe(&g) {
            self.problem(
                v.span(),
                format!("`group`: {g:?} must be 1 to 128 letters, digits, '.', '_' or '-'"),
            );
            return None;
        }
        Some(g)
    }

    /// Parses `[coordination]` (the value `v` of the key).
    pub(super) fn coordination(&mut self, v: &super::Value<'_>) -> Option<Coordination> {
        let Some(t) = v.get_ref().as_table() else {
            self.problem(v.span(), "`coordination` must be a table".into());
            return None;
        };
        if !cfg!(feature = "fleet") {
            self.problem(
                v.span(),
                "[coordination] needs a refreshd built with the `fleet` feature (this one was built without it: `cargo build --features fleet`)".into(),
            );
            return None;
        }
        let before = self.problems.len();
        let mut c = Coordination {
            at: self.line_col(v.span().start),
            ..Coordination::default()
        };
        self.coordination_keys(t, &mut c);
        self.coordination_required(t, v, &c);
        (self.problems.len() == before).then_some(c)
    }

    fn coordination_keys(&mut self, t: &DeTable<'_>, c: &mut Coordination) {
        let tls = t.iter().any(|(k, _)| k.get_ref().as_ref() == "ca_file");
        for (k, v) in t.iter() {
            let key = k.get_ref().as_ref();
            match key {
                "etcd_endpoints" => {
                    c.endpoints_at = self.line_col(v.span().start);
                    if let Some(list) = self.value::<Vec<String>>(key, v) {
                        if list.is_empty() {
                            self.problem(v.span(), "`etcd_endpoints` is empty: name at least one etcd member, like \"http://10.0.0.5:2379\"".into());
                        }
                        for e in &list {
                            if let Some(why) = endpoint_problem(e, tls) {
                                self.problem(v.span(), format!("`etcd_endpoints`: {why}"));
                            }
                        }
                        c.etcd_endpoints = list;
                    }
                }
                "group" | "name" => {
                    if let Some(s) = self.value::<String>(key, v) {
                        if key_safe(&s) {
                            if key == "group" {
                                c.group = s;
                            } else {
                                c.name = s;
                            }
                        } else {
                            self.problem(v.span(), format!("`{key}`: {s:?} must be 1 to 128 letters, digits, '.', '_' or '-'"));
                        }
                    }
                }
                "max_concurrent" => {
                    if let Some(n) = self.value::<i64>(key, v) {
                        match usize::try_from(n) {
                            Ok(n) if n >= 1 => c.max_concurrent = n,
                            _ => self.problem(v.span(), format!("`max_concurrent` must be at least 1, not {n} (to stop refreshing, pause the daemons)")),
                        }
                    }
                }
                "lease_ttl" => {
                    if let Some(d) = self.value::<HumanDuration>(key, v) {
                        if d.0 < Duration::from_secs(3) || d.0.subsec_nanos() != 0 {
                            self.problem(
                                v.span(),
                                "`lease_ttl` must be whole seconds, at least 3s".into(),
                            );
                        } else {
                            c.lease_ttl = d.0;
                        }
                    }
                }
                "prefix" => {
                    if let Some(s) = self.value::<String>(key, v) {
                        if s.starts_with('/') && !s.ends_with('/') && !s.contains("//") {
                            c.prefix = s;
                        } else {
                            self.problem(v.span(), format!("`prefix`: {s:?} must start with '/' and not end with it, like \"/refreshd\""));
                        }
                    }
                }
                "user" => c.user = self.value(key, v),
                "password_file" => c.password_file = self.abs_path(key, v),
                "ca_file" => c.ca_file = self.abs_path(key, v),
                "cert_file" => c.cert_file = self.abs_path(key, v),
                "key_file" => c.key_file = self.abs_path(key, v),
                "health_command" => {
                    if let Some(argv) = self.value::<Vec<String>>(key, v) {
                        if argv.first().is_some_and(|a| a.starts_with('/')) {
                            c.health_command = Some(argv);
                        } else {
                            self.problem(v.span(), "`health_command` must be an argv list starting with an absolute path, like [\"/usr/bin/curl\", \"-fsS\", \"http://…\"]".into());
                        }
                    }
                }
                "health_url" => {
                    if let Some(u) = self.value::<String>(key, v) {
                        match crate::coordination::gate::HttpUrl::parse(&u) {
                            Ok(_) => c.health_url = Some(u),
                            Err(why) => self.problem(v.span(), format!("`health_url`: {why}")),
                        }
                    }
                }
                "health_timeout" => set(&mut c.health_timeout, self.positive_duration(key, v)),
                _ => self.unknown(k, " in [coordination]", KEYS),
            }
        }
    }

    /// What must be there, and what goes together.
    fn coordination_required(&mut self, t: &DeTable<'_>, v: &super::Value<'_>, c: &Coordination) {
        let has = |k: &str| t.iter().any(|(key, _)| key.get_ref().as_ref() == k);
        for key in ["etcd_endpoints", "group"] {
            if !has(key) {
                self.problem(v.span(), format!("[coordination] needs `{key}`"));
            }
        }
        if c.user.is_some() != c.password_file.is_some() {
            self.problem(
                v.span(),
                "[coordination]: `user` and `password_file` go together".into(),
            );
        }
        if c.cert_file.is_some() != c.key_file.is_some() {
            self.problem(
                v.span(),
                "[coordination]: `cert_file` and `key_file` go together".into(),
            );
        }
        if c.cert_file.is_some() && c.ca_file.is_none() {
            self.problem(
                v.span(),
                "[coordination]: a client certificate needs `ca_file` (TLS)".into(),
            );
        }
        if c.health_command.is_some() && c.health_url.is_some() {
            self.problem(
                v.span(),
                "[coordination]: one health gate: `health_command` or `health_url`, not both"
                    .into(),
            );
        }
    }
}

#[cfg(all(test, feature = "fleet"))]
mod tests {
    use crate::config::parse;

    fn problems(section: &str) -> Vec<String> {
        let text = format!("[[paths]]\npath = \"/srv/a\"\n\n[coordination]\n{section}");
        match parse(&text, "f.toml") {
            Ok(_) => vec![],
            Err(e) => e.problems.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn a_full_section_parses() {
        let text = "[[paths]]\npath = \"/srv/a\"\n[coordination]\netcd_endpoints = [\"http://10.0.0.5:2379\", \"http://e2:2379\"]\ngroup = \"shard-7\"\nmax_concurrent = 2\nlease_ttl = \"20s\"\nname = \"host-a\"\nuser = \"refreshd\"\npassword_file = \"/etc/refreshd/etcd.pw\"\nhealth_url = \"http://127.0.0.1:9200/_cluster/health\"\n";
        let c = parse(text, "f").unwrap_or_else(|e| panic!("{e}"));
        let k = c.coordination.unwrap_or_else(|| panic!("parsed"));
        assert_eq!(k.group, "shard-7");
        assert_eq!(k.max_concurrent, 2);
        assert_eq!(k.lease_ttl.as_secs(), 20);
        assert_eq!(k.name, "host-a");
        assert_eq!(k.prefix, "/refreshd");
        assert_eq!(k.at, (3, 1));
    }

    #[test]
    fn a_tree_may_name_its_own_group() {
        let text = "[[paths]]\npath = \"/srv/a\"\ngroup = \"shard-2\"\n[[paths]]\npath = \"/srv/b\"\n[coordination]\netcd_endpoints = [\"http://e:2379\"]\ngroup = \"shard-1\"\n";
        let c = parse(text, "f").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.paths[0].group.as_deref(), Some("shard-2"));
        assert_eq!(c.paths[1].group, None, "[coordination]'s group");
        let alone = "[[paths]]\npath = \"/srv/a\"\ngroup = \"shard-2\"\n";
        let e = parse(alone, "f")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.starts_with("f:3:9:") && e.contains("needs a [coordination] section"),
            "{e}"
        );
    }

    #[test]
    fn bad_sections_are_refused_with_positions() {
        let p = problems("etcd_endpoints = []\ngroup = \"\"\nmax_concurrent = 0\n");
        assert!(
            p.iter()
                .any(|p| p.starts_with("f.toml:5:18: `etcd_endpoints` is empty")),
            "{p:?}"
        );
        assert!(
            p.iter().any(|p| p.starts_with("f.toml:6:9: `group`")),
            "{p:?}"
        );
        assert!(
            p.iter()
                .any(|p| p.starts_with("f.toml:7:18: `max_concurrent` must be at least 1")),
            "{p:?}"
        );
        let p = problems("etcd_endpoints = [\"10.0.0.5:2379\", \"https://e:2379\"]\n");
        assert!(
            p.iter().any(|p| p.contains("must start with http://")),
            "{p:?}"
        );
        assert!(
            p.iter().any(|p| p.contains("is https: name the CA")),
            "{p:?}"
        );
        assert!(p.iter().any(|p| p.contains("needs `group`")), "{p:?}");
        let p = problems("etcd_endpoints = [\"http://e:2379\"]\ngroup = \"g\"\nca_file = \"/ca.pem\"\ncert_file = \"/c.pem\"\n");
        assert!(
            p.iter()
                .any(|p| p.contains("is plain http but `ca_file` is set")),
            "{p:?}"
        );
        assert!(
            p.iter()
                .any(|p| p.contains("`cert_file` and `key_file` go together")),
            "{p:?}"
        );
        let p = problems("etcd_endpoints = [\"http://e:2379\"]\ngroup = \"g\"\nlease_ttl = \"1s\"\nuser = \"u\"\nhealth_command = [\"curl\"]\nfoo = 1\n");
        assert!(
            p.iter()
                .any(|p| p.contains("`lease_ttl` must be whole seconds")),
            "{p:?}"
        );
        assert!(
            p.iter()
                .any(|p| p.contains("`user` and `password_file` go together")),
            "{p:?}"
        );
        assert!(p.iter().any(|p| p.contains("absolute path")), "{p:?}");
        assert!(
            p.iter()
                .any(|p| p.contains("unknown key `foo` in [coordination]")),
            "{p:?}"
        );
        assert_eq!(
            problems("etcd_endpoints = [\"http://e:2379\"]\ngroup = \"g\"\n"),
            Vec::<String>::new()
        );
    }
}

#[cfg(all(test, not(feature = "fleet")))]
mod without_fleet {
    #[test]
    fn the_section_is_refused_by_a_build_without_fleet() {
        let text = "[[paths]]\npath = \"/srv/a\"\n[coordination]\ngroup = \"g\"\n";
        let e = crate::config::parse(text, "f").err().map(|e| e.to_string());
        assert!(
            e.as_deref()
                .is_some_and(|e| e.starts_with("f:3:1:") && e.contains("`fleet` feature")),
            "{e:?}"
        );
    }
}
