//! Reading a crate: its module tree from `lib.rs` and the `mod`
//! declarations (test-only modules left out), and every path each file
//! names — `use` lines, types, expressions, macro arguments.

use std::path::Path;

use syn::visit::Visit;

use super::{Crate, ModPath, Module};

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
pub(super) fn read_crate(root: &Path) -> Crate {
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
