//! The shape of the code: imports point one way.
//!
//! Every crate of the workspace is read as its module tree (from `lib.rs`
//! and the `mod` declarations, test-only modules left out). Each path a file
//! names (`use` lines, paths in types and expressions, paths inside macro
//! calls) is resolved to the file that *defines* the item, following
//! `pub use` re-exports, so a facade `mod.rs` is not mistaken for the owner.
//!
//! Then, at every level of the tree, the children of a module (its own file,
//! its child files and its child folders) must import each other without a
//! circle. That one rule forbids circles between files (any circle of files
//! shows as a circle at the level that holds them all) and between folders.
//!
//! On top of that, the crate's top-level modules keep the layer order that
//! `LAYERS` writes down: a module imports only from layers below its own.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

mod graph;
mod read;
use graph::strongly_connected;
use read::read_crate;

type ModPath = Vec<String>;

/// The library's top-level modules, highest layer first: a module imports
/// only from modules of lower layers (later in this list), never from its
/// own layer or a higher one. Read downwards, this is the walk of a
/// setting: the config is read, the daemon runs the drives, policy,
/// sampler and inventory decide, the engine rewrites, io talks to the
/// kernel.
const LAYERS: &[&[&str]] = &[
    &["cli"],
    &["daemon"],
    &["coordination"],
    &["oneshot", "survey"],
    &["config"],
    &["policy", "diagnose"],
    &["sampler"],
    &["inventory"],
    &["walk"],
    &["engine"],
    &["drive"],
    &["io"],
    &["clock"],
];

/// One module: the file that holds it and what it re-exports.
#[derive(Debug, Default)]
struct Module {
    /// `pub use` items: name → the path it stands for.
    reexports: HashMap<String, ModPath>,
    /// The path and the names of every reference in this module's file.
    refs: Vec<ModPath>,
    /// Aliases brought in by `use` (name → full path).
    aliases: HashMap<String, ModPath>,
    /// Child modules that exist only in test builds.
    test_children: BTreeSet<String>,
}

#[derive(Debug, Default)]
struct Crate {
    modules: BTreeMap<ModPath, Module>,
}

/// The workspace: crate name → crate.
struct Workspace {
    crates: BTreeMap<String, Crate>,
}

/// Where a reference lands: the crate and the module that defines it.
type Owner = (String, ModPath);

impl Workspace {
    /// Resolves a path named in `from` (crate, module) to the module that
    /// defines the item, or None for paths outside the workspace.
    fn resolve(&self, krate: &str, from: &ModPath, segs: &ModPath, depth: u32) -> Option<Owner> {
        if depth > 16 || segs.is_empty() {
            return None;
        }
        let c = &self.crates[krate];
        let module = c.modules.get(from)?;
        let (mut base, rest): (ModPath, &[String]) = match segs[0].as_str() {
            "crate" => (Vec::new(), &segs[1..]),
            "self" => (from.clone(), &segs[1..]),
            "super" => {
                let mut base = from.clone();
                let mut i = 0;
                while segs.get(i).is_some_and(|s| s == "super") {
                    base.pop();
                    i += 1;
                }
                (base, &segs[i..])
            }
            first => {
                let mut child = from.clone();
                child.push(first.to_string());
                if c.modules.contains_key(&child) {
                    (child, &segs[1..])
                } else if let Some(alias) = module.aliases.get(first) {
                    if alias.len() == 1 && alias[0] == first {
                        return None;
                    }
                    let mut full = alias.clone();
                    full.extend(segs[1..].iter().cloned());
                    return self.resolve(krate, from, &full, depth + 1);
                } else if let Some(other) = self.crate_named(first) {
                    if other == krate {
                        return None;
                    }
                    return self.resolve(
                        other,
                        &Vec::new(),
                        &{
                            let mut p = vec!["crate".to_string()];
                            p.extend(segs[1..].iter().cloned());
                            p
                        },
                        depth + 1,
                    );
                } else {
                    return None;
                }
            }
        };
        // Longest module prefix, then the item named after it.
        let mut i = 0;
        while i < rest.len() {
            let mut next = base.clone();
            next.push(rest[i].clone());
            if c.modules.contains_key(&next) {
                base = next;
                i += 1;
            } else {
                break;
            }
        }
        if i < rest.len() && c.modules[&base].test_children.contains(&rest[i]) {
            return None;
        }
        if i < rest.len() {
            if let Some(target) = c.modules.get(&base)?.reexports.get(&rest[i]) {
                let mut full = target.clone();
                full.extend(rest[i + 1..].iter().cloned());
                return self
                    .resolve(krate, &base, &full, depth + 1)
                    .or_else(|| Some((krate.to_string(), base.clone())));
            }
        }
        Some((krate.to_string(), base))
    }

    fn crate_named(&self, ident: &str) -> Option<&str> {
        self.crates
            .keys()
            .find(|k| k.replace('-', "_") == ident)
            .map(|k| k.as_str())
    }

    /// Edges between modules of one crate: (from, to) → the names that tie.
    fn edges(&self, krate: &str) -> BTreeMap<(ModPath, ModPath), BTreeSet<String>> {
        let c = &self.crates[krate];
        let mut edges: BTreeMap<(ModPath, ModPath), BTreeSet<String>> = BTreeMap::new();
        for (path, module) in &c.modules {
            for r in &module.refs {
                let Some((k, to)) = self.resolve(krate, path, r, 0) else {
                    continue;
                };
                if k == krate && &to != path {
                    edges
                        .entry((path.clone(), to))
                        .or_default()
                        .insert(r.last().cloned().unwrap_or_default());
                }
            }
        }
        edges
    }
}

fn workspace() -> Workspace {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut crates = BTreeMap::new();
    let members = [
        ("refreshd", root.join("src/lib.rs")),
        ("testbed", root.join("testbed/src/lib.rs")),
        ("refreshd-protocol", root.join("protocol/src/lib.rs")),
        ("refreshctl", root.join("refreshctl/src/main.rs")),
    ];
    for (name, file) in members {
        if file.exists() {
            crates.insert(name.to_string(), read_crate(&file));
        }
    }
    Workspace { crates }
}

fn show(p: &ModPath) -> String {
    if p.is_empty() {
        "crate".into()
    } else {
        p.join("::")
    }
}

/// The circles among the children of every module, as readable lines.
fn circles(ws: &Workspace, krate: &str) -> Vec<String> {
    let edges = ws.edges(krate);
    // Per level (a module path), the edges between its children. A child
    // is the next segment below the level, or "(self)" for the level's own
    // file.
    let mut levels: BTreeMap<ModPath, BTreeMap<(String, String), Vec<String>>> = BTreeMap::new();
    for ((a, b), names) in &edges {
        let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
        let level: ModPath = a[..common].to_vec();
        let child = |p: &ModPath| p.get(common).cloned().unwrap_or_else(|| "(self)".into());
        let (ca, cb) = (child(a), child(b));
        if ca == cb {
            continue;
        }
        let why = format!(
            "{} -> {}: {}",
            show(a),
            show(b),
            names.iter().cloned().collect::<Vec<_>>().join(", ")
        );
        levels
            .entry(level)
            .or_default()
            .entry((ca, cb))
            .or_default()
            .push(why);
    }
    let mut found = Vec::new();
    for (level, level_edges) in &levels {
        for scc in strongly_connected(level_edges.keys()) {
            let mut lines = vec![format!(
                "circle in {}::{{{}}}",
                show(level),
                scc.iter().cloned().collect::<Vec<_>>().join(", ")
            )];
            for ((x, y), whys) in level_edges {
                if scc.contains(x) && scc.contains(y) {
                    lines.extend(whys.iter().map(|w| format!("    {w}")));
                }
            }
            found.push(lines.join("\n"));
        }
    }
    found
}

#[test]
fn no_import_circles_between_files_or_folders() {
    let ws = workspace();
    let mut all = Vec::new();
    for name in ws.crates.keys() {
        for c in circles(&ws, name) {
            all.push(format!("{name}: {c}"));
        }
    }
    assert!(
        all.is_empty(),
        "{} import circle(s):\n{}",
        all.len(),
        all.join("\n")
    );
}

#[test]
fn top_level_modules_import_only_lower_layers() {
    let ws = workspace();
    let rank = |m: &str| LAYERS.iter().position(|layer| layer.contains(&m));
    let mut wrong = BTreeSet::new();
    let mut unranked = BTreeSet::new();
    for ((a, b), names) in ws.edges("refreshd") {
        let (Some(ta), Some(tb)) = (a.first(), b.first()) else {
            continue;
        };
        if ta == tb {
            continue;
        }
        match (rank(ta), rank(tb)) {
            (Some(ra), Some(rb)) if ra < rb => {}
            (Some(_), Some(_)) => {
                wrong.insert(format!(
                    "{} -> {}: {}",
                    show(&a),
                    show(&b),
                    names.into_iter().collect::<Vec<_>>().join(", ")
                ));
            }
            _ => {
                unranked.insert(if rank(ta).is_none() {
                    ta.clone()
                } else {
                    tb.clone()
                });
            }
        }
    }
    assert!(
        unranked.is_empty(),
        "modules missing from LAYERS: {unranked:?}"
    );
    assert!(
        wrong.is_empty(),
        "imports against the layer order:\n{}",
        wrong.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// The checker itself: a circle planted in a scratch crate is found, and
/// a re-export through a facade is not mistaken for one.
#[test]
fn the_checker_finds_a_planted_circle() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let write = |p: &str, s: &str| {
        let f = src.join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, s).unwrap();
    };
    write("lib.rs", "mod a;\nmod b;\nmod facade;\n");
    write("a.rs", "use crate::facade::Thing;\npub struct A;\n");
    write("facade/mod.rs", "mod inner;\npub use inner::Thing;\n");
    write("facade/inner.rs", "pub struct Thing;\n");
    write(
        "b.rs",
        "pub fn f() -> crate::a::A { crate::a::A }\n\
         #[cfg(all(test, not(feature = \"x\")))]\n\
         mod t { fn g() -> crate::facade::Thing { todo!() } }\n",
    );
    let mut crates = BTreeMap::new();
    crates.insert("x".to_string(), read_crate(&src.join("lib.rs")));
    let ws = Workspace { crates };
    assert!(circles(&ws, "x").is_empty(), "{:?}", circles(&ws, "x"));
    let facade_edge = ws
        .edges("x")
        .into_keys()
        .any(|(a, b)| show(&a) == "a" && show(&b) == "facade::inner");
    assert!(facade_edge, "the re-export was not followed to its owner");

    write("facade/inner.rs", "pub struct Thing(pub crate::b::B);\n");
    write(
        "b.rs",
        "pub struct B;\nfn g() { let _ = std::mem::size_of::<crate::a::A>(); }\n",
    );
    let mut crates = BTreeMap::new();
    crates.insert("x".to_string(), read_crate(&src.join("lib.rs")));
    let ws = Workspace { crates };
    let found = circles(&ws, "x");
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("a, b, facade"), "{}", found[0]);
}
