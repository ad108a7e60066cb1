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

use syn::visit::Visit;

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

fn has_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| match &a.meta {
        syn::Meta::List(l) if l.path.is_ident("cfg") => {
            l.parse_args::<syn::Meta>().is_ok_and(|m| implies_test(&m))
        }
        _ => false,
    })
}

/// Whether a `cfg` predicate holds only in test builds: `test`,
/// `all(…, test, …)`, `any(…)` whose every branch does.
fn implies_test(m: &syn::Meta) -> bool {
    let nested = |l: &syn::MetaList| {
        l.parse_args_with(
            syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated,
        )
        .map(|p| p.into_iter().collect::<Vec<_>>())
        .unwrap_or_default()
    };
    match m {
        syn::Meta::Path(p) => p.is_ident("test"),
        syn::Meta::List(l) if l.path.is_ident("all") => nested(l).iter().any(implies_test),
        syn::Meta::List(l) if l.path.is_ident("any") => {
            let n = nested(l);
            !n.is_empty() && n.iter().all(implies_test)
        }
        _ => false,
    }
}

fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| match &a.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

/// Reads a crate's module tree from its root file.
fn read_crate(root: &Path) -> Crate {
    let mut krate = Crate::default();
    read_module(&mut krate, Vec::new(), root, true);
    krate
}

fn read_module(krate: &mut Crate, path: ModPath, file: &Path, owns_dir: bool) {
    let text =
        std::fs::read_to_string(file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
    let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    // A module's children live beside `mod.rs`/`lib.rs`, else in a folder
    // named after the file.
    let dir = if owns_dir {
        file.parent().unwrap().to_path_buf()
    } else {
        file.with_extension("")
    };
    let mut module = Module::default();
    let mut children = Vec::new();
    collect_items(&ast.items, &mut module, &mut children);
    krate.modules.insert(path.clone(), module);
    for (child, attr_path) in children {
        let (child_file, child_owns) = match attr_path {
            Some(p) => (dir.join(p), false),
            None => {
                let flat = dir.join(format!("{child}.rs"));
                if flat.exists() {
                    (flat, false)
                } else {
                    (dir.join(&child).join("mod.rs"), true)
                }
            }
        };
        let mut child_path = path.clone();
        child_path.push(child);
        read_module(krate, child_path, &child_file, child_owns);
    }
}

/// Collects the items of one file (and of its inline modules, which belong
/// to the same file): child module files, re-exports, references.
fn collect_items(
    items: &[syn::Item],
    module: &mut Module,
    children: &mut Vec<(String, Option<String>)>,
) {
    for item in items {
        if item_attrs(item).is_some_and(has_cfg_test) {
            if let syn::Item::Mod(m) = item {
                module.test_children.insert(m.ident.to_string());
            }
            continue;
        }
        match item {
            syn::Item::Mod(m) if m.content.is_none() => {
                children.push((m.ident.to_string(), path_attr(&m.attrs)));
            }
            syn::Item::Mod(m) => {
                let (_, inner) = m.content.as_ref().unwrap();
                collect_items(inner, module, children);
            }
            syn::Item::Use(u) => {
                let public = !matches!(u.vis, syn::Visibility::Inherited);
                let mut leaves = Vec::new();
                use_leaves(&u.tree, Vec::new(), &mut leaves);
                for (full, alias) in leaves {
                    if let Some(alias) = alias {
                        if public {
                            module.reexports.insert(alias.clone(), full.clone());
                        }
                        module.aliases.insert(alias, full.clone());
                    }
                    module.refs.push(full);
                }
            }
            other => {
                let mut refs = Refs::default();
                refs.visit_item(other);
                module.refs.extend(refs.paths);
            }
        }
    }
}

fn item_attrs(item: &syn::Item) -> Option<&[syn::Attribute]> {
    Some(match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        _ => return None,
    })
}

/// Expands a `use` tree into full paths with the name each binds.
fn use_leaves(tree: &syn::UseTree, prefix: ModPath, out: &mut Vec<(ModPath, Option<String>)>) {
    match tree {
        syn::UseTree::Path(p) => {
            let mut next = prefix;
            next.push(p.ident.to_string());
            use_leaves(&p.tree, next, out);
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            let mut full = prefix;
            if name == "self" {
                let alias = full.last().cloned();
                out.push((full, alias));
            } else {
                full.push(name.clone());
                out.push((full, Some(name)));
            }
        }
        syn::UseTree::Rename(r) => {
            let mut full = prefix;
            if r.ident != "self" {
                full.push(r.ident.to_string());
            }
            out.push((full, Some(r.rename.to_string())));
        }
        syn::UseTree::Glob(_) => out.push((prefix, None)),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                use_leaves(t, prefix.clone(), out);
            }
        }
    }
}

/// Every path named in an item, test-only parts left out.
#[derive(Default)]
struct Refs {
    paths: Vec<ModPath>,
}

impl<'a> Visit<'a> for Refs {
    fn visit_path(&mut self, p: &'a syn::Path) {
        let segs: ModPath = p.segments.iter().map(|s| s.ident.to_string()).collect();
        if segs.len() > 1 {
            self.paths.push(segs);
        }
        syn::visit::visit_path(self, p);
    }
    fn visit_macro(&mut self, m: &'a syn::Macro) {
        // Macro bodies are not parsed; their paths are read from the
        // tokens (`a :: b :: c`).
        let text = m.tokens.to_string();
        let words: Vec<&str> = text.split_whitespace().collect();
        let mut i = 0;
        while i < words.len() {
            let mut segs = vec![words[i].to_string()];
            let mut j = i;
            while j + 2 < words.len() && words[j + 1] == "::" {
                segs.push(words[j + 2].to_string());
                j += 2;
            }
            if segs.len() > 1 && segs.iter().all(|s| is_ident(s)) {
                self.paths.push(segs);
            }
            i = j + 1;
        }
        syn::visit::visit_macro(self, m);
    }
    fn visit_impl_item_fn(&mut self, f: &'a syn::ImplItemFn) {
        if !has_cfg_test(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }
    fn visit_stmt(&mut self, s: &'a syn::Stmt) {
        let test_only = match s {
            syn::Stmt::Local(l) => has_cfg_test(&l.attrs),
            syn::Stmt::Item(i) => item_attrs(i).is_some_and(has_cfg_test),
            syn::Stmt::Expr(e, _) => expr_attrs(e).is_some_and(has_cfg_test),
            syn::Stmt::Macro(m) => has_cfg_test(&m.attrs),
        };
        if !test_only {
            syn::visit::visit_stmt(self, s);
        }
    }
    fn visit_field(&mut self, f: &'a syn::Field) {
        if !has_cfg_test(&f.attrs) {
            syn::visit::visit_field(self, f);
        }
    }
    fn visit_expr_field(&mut self, _: &'a syn::ExprField) {}
}

fn expr_attrs(e: &syn::Expr) -> Option<&[syn::Attribute]> {
    Some(match e {
        syn::Expr::Assign(x) => &x.attrs,
        syn::Expr::Block(x) => &x.attrs,
        syn::Expr::Call(x) => &x.attrs,
        syn::Expr::If(x) => &x.attrs,
        syn::Expr::Macro(x) => &x.attrs,
        syn::Expr::Match(x) => &x.attrs,
        syn::Expr::MethodCall(x) => &x.attrs,
        syn::Expr::Path(x) => &x.attrs,
        syn::Expr::Unsafe(x) => &x.attrs,
        _ => return None,
    })
}

fn is_ident(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_alphanumeric() || c == '_')
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

/// Tarjan's strongly connected components with more than one member.
fn strongly_connected<'a>(
    edges: impl Iterator<Item = &'a (String, String)>,
) -> Vec<BTreeSet<String>> {
    let mut graph: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges {
        graph.entry(a).or_default().push(b);
        graph.entry(b).or_default();
    }
    struct State<'g> {
        index: HashMap<&'g str, usize>,
        low: HashMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        out: Vec<BTreeSet<String>>,
    }
    fn visit<'g>(v: &'g str, g: &BTreeMap<&'g str, Vec<&'g str>>, s: &mut State<'g>) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for &w in &g[v] {
            if !s.index.contains_key(w) {
                visit(w, g, s);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut scc = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                scc.insert(w.to_string());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                s.out.push(scc);
            }
        }
    }
    let mut s = State {
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    let nodes: Vec<&str> = graph.keys().copied().collect();
    for v in nodes {
        if !s.index.contains_key(v) {
            visit(v, &graph, &mut s);
        }
    }
    s.out
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
