//! `[coordination]`: refreshes of the drives that hold copies of the same
//! data (a `group`, across hosts) take one of `max_concurrent` slots in
//! etcd first. Parsed and checked here, with positions; the daemon's side
//! is in `crate::coordination`.

use std::path::PathBuf;
use std::time::Duration;

use toml::de::DeTable;

use super::parser::{Parser, Position, Value};
use super::readers;
use super::table::table;
use super::url::HttpUrl;

table! {
    /// The validated `[coordination]` section.
    pub struct Coordination in "coordination" {
        /// `http://host:port` of etcd members, or all `https://` with
        /// `ca_file`. Required.
        etcd_endpoints: Vec<String> = vec![], key "etcd_endpoints", read readers::value,
            shown "required";
        /// The drives (on any host) that hold copies of the same data: the
        /// default group of this host's trees. Required.
        group: String = String::new(), key "group", read readers::name, shown "required";
        /// At most this many drives of the group refresh at once; every
        /// member of a group must say the same.
        max_concurrent: usize = 1, key "max_concurrent", read max_concurrent;
        /// A dead host's slot frees itself after this (whole seconds, at
        /// least 3s).
        lease_ttl: Duration = Duration::from_secs(15), key "lease_ttl", read lease_ttl;
        /// Key prefix in etcd (`<prefix>/<group>/queue/…`).
        prefix: String = "/refreshd".into(), key "prefix", read prefix;
        /// This daemon's name in status and in etcd.
        name: String = host_name(), key "name", read readers::name, shown "the host name";
        /// etcd authentication: the user (with `password_file`).
        user: Option<String> = None, key "user", read |p, k, v| p.value(k, v).map(Some);
        /// A file holding the etcd user's password.
        password_file: Option<PathBuf> = None, key "password_file",
            read |p, k, v| readers::abs_path(p, k, v).map(Some);
        /// TLS to etcd: the CA that signed the members' certificates.
        ca_file: Option<PathBuf> = None, key "ca_file",
            read |p, k, v| readers::abs_path(p, k, v).map(Some);
        /// This host's client certificate (etcd's `--client-cert-auth`).
        cert_file: Option<PathBuf> = None, key "cert_file",
            read |p, k, v| readers::abs_path(p, k, v).map(Some);
        /// The client certificate's key.
        key_file: Option<PathBuf> = None, key "key_file",
            read |p, k, v| readers::abs_path(p, k, v).map(Some);
        /// Asked before a slot is taken and between files: argv of a
        /// command that exits 0 when the cluster can spare a copy (a "no"
        /// holds the refresh and it is asked again 10 s later).
        health_command: Option<Vec<String>> = None, key "health_command", read health_command;
        /// Or a URL (`http://` only) that answers 2xx when it can.
        health_url: Option<HttpUrl> = None, key "health_url", read health_url;
        /// How long the health check may take (then it said no).
        health_timeout: Duration = Duration::from_secs(10), key "health_timeout",
            read readers::interval;
    }
    extra {
        /// Line and column of the section, and of `etcd_endpoints`.
        #[serde(skip)]
        at: Position = (1, 1);
        #[serde(skip)]
        endpoints_at: Position = (1, 1);
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

fn max_concurrent(p: &mut Parser<'_>, key: &str, v: &Value<'_>) -> Option<usize> {
    let n = p.value::<i64>(key, v)?;
    match usize::try_from(n) {
        Ok(n) if n >= 1 => Some(n),
        _ => {
            p.problem(v.span(), format!("`max_concurrent` must be at least 1, not {n} (to stop refreshing, pause the daemons)"));
            None
        }
    }
}

fn lease_ttl(p: &mut Parser<'_>, key: &str, v: &Value<'_>) -> Option<Duration> {
    let d = readers::duration(p, key, v)?;
    if d < Duration::from_secs(3) || d.subsec_nanos() != 0 {
        p.problem(
            v.span(),
            "`lease_ttl` must be whole seconds, at least 3s".into(),
        );
        return None;
    }
    Some(d)
}

fn prefix(p: &mut Parser<'_>, key: &str, v: &Value<'_>) -> Option<String> {
    let s: String = p.value(key, v)?;
    if s.starts_with('/') && !s.ends_with('/') && !s.contains("//") {
        return Some(s);
    }
    p.problem(
        v.span(),
        format!("`prefix`: {s:?} must start with '/' and not end with it, like \"/refreshd\""),
    );
    None
}

fn health_command(p: &mut Parser<'_>, key: &str, v: &Value<'_>) -> Option<Option<Vec<String>>> {
    let argv: Vec<String> = p.value(key, v)?;
    if argv.first().is_some_and(|a| a.starts_with('/')) {
        return Some(Some(argv));
    }
    p.problem(v.span(), "`health_command` must be an argv list starting with an absolute path, like [\"/usr/bin/curl\", \"-fsS\", \"http://…\"]".into());
    None
}

fn health_url(p: &mut Parser<'_>, key: &str, v: &Value<'_>) -> Option<Option<HttpUrl>> {
    let u: String = p.value(key, v)?;
    match HttpUrl::parse(&u) {
        Ok(url) => Some(Some(url)),
        Err(why) => {
            p.problem(v.span(), format!("`health_url`: {why}"));
            None
        }
    }
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

/// A `[[paths]]` entry's own `group` (the drives holding copies of its
/// data, when not `[coordination]`'s).
pub(super) fn path_group(
    p: &mut Parser<'_>,
    v: &Value<'_>,
    has_coordination: bool,
) -> Option<String> {
    let g = readers::name(p, "group", v)?;
    if !has_coordination {
        p.problem(
            v.span(),
            "`group` in [[paths]] needs a [coordination] section (etcd endpoints)".into(),
        );
        return None;
    }
    Some(g)
}

/// Parses `[coordination]` (the value `v` of the key).
pub(super) fn section(p: &mut Parser<'_>, v: &Value<'_>) -> Option<Coordination> {
    let Some(t) = v.get_ref().as_table() else {
        p.problem(v.span(), "`coordination` must be a table".into());
        return None;
    };
    if !cfg!(feature = "fleet") {
        p.problem(
            v.span(),
            "[coordination] needs a refreshd built with the `fleet` feature (this one was built without it: `cargo build --features fleet`)".into(),
        );
        return None;
    }
    let before = p.problems.len();
    let mut c = Coordination {
        at: p.line_col(v.span().start),
        ..Coordination::default()
    };
    for (k, val) in t.iter() {
        let key = k.get_ref().as_ref();
        if key == "etcd_endpoints" {
            c.endpoints_at = p.line_col(val.span().start);
        }
        if !c.read(p, key, val) {
            p.unknown(k, " in [coordination]", Coordination::KEYS);
        }
    }
    endpoints(p, &c);
    required(p, t, v, &c);
    (p.problems.len() == before).then_some(c)
}

/// Each endpoint is a URL of the scheme `ca_file` calls for.
fn endpoints(p: &mut Parser<'_>, c: &Coordination) {
    if c.etcd_endpoints.is_empty() {
        return;
    }
    let tls = c.ca_file.is_some();
    for e in &c.etcd_endpoints {
        if let Some(why) = endpoint_problem(e, tls) {
            p.problem_at(c.endpoints_at, format!("`etcd_endpoints`: {why}"));
        }
    }
}

/// What must be there, and what goes together.
fn required(p: &mut Parser<'_>, t: &DeTable<'_>, v: &Value<'_>, c: &Coordination) {
    let has = |k: &str| t.iter().any(|(key, _)| key.get_ref().as_ref() == k);
    for key in ["etcd_endpoints", "group"] {
        if !has(key) {
            p.problem(v.span(), format!("[coordination] needs `{key}`"));
        }
    }
    if has("etcd_endpoints") && c.etcd_endpoints.is_empty() {
        p.problem_at(c.endpoints_at, "`etcd_endpoints` is empty: name at least one etcd member, like \"http://10.0.0.5:2379\"".into());
    }
    let pairs = [
        (
            c.user.is_some() != c.password_file.is_some(),
            "`user` and `password_file` go together",
        ),
        (
            c.cert_file.is_some() != c.key_file.is_some(),
            "`cert_file` and `key_file` go together",
        ),
        (
            c.cert_file.is_some() && c.ca_file.is_none(),
            "a client certificate needs `ca_file` (TLS)",
        ),
        (
            c.health_command.is_some() && c.health_url.is_some(),
            "one health gate: `health_command` or `health_url`, not both",
        ),
    ];
    for (wrong, what) in pairs {
        if wrong {
            p.problem(v.span(), format!("[coordination]: {what}"));
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
