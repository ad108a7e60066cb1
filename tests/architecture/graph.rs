//! The graph part: strongly connected components (Tarjan).

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Tarjan's strongly connected components with more than one member.
pub(super) fn strongly_connected<'a>(
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
