//! An owned YAML tree that remembers where each node was in its file: the fleet document is
//! cut into per-host topologies (nodes copied, keys dropped or renamed, ports added) and the
//! result written back as YAML; an error control's parser finds in a generated topology is
//! led back to the fleet file's line and column through the field path.

use yamlpath::{Located, Value};

/// A node and where it started in its file (1-based line, column; (0, 0) for generated ones).
#[derive(Clone, Debug, PartialEq)]
pub struct Y {
    pub pos: (usize, usize),
    pub kind: Kind,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// A single value (an empty one is `""`: the same as leaving the key out).
    S(String),
    L(Vec<Y>),
    M(Vec<(String, Y)>),
}

impl Y {
    /// A generated single value.
    pub fn s(v: impl Into<String>) -> Y {
        Y { pos: (0, 0), kind: Kind::S(v.into()) }
    }

    /// A generated list.
    pub fn l(items: Vec<Y>) -> Y {
        Y { pos: (0, 0), kind: Kind::L(items) }
    }

    /// A generated mapping.
    pub fn m(entries: Vec<(&str, Y)>) -> Y {
        let e = entries.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        Y { pos: (0, 0), kind: Kind::M(e) }
    }

    /// Copies a parsed value (its depth is bounded by [`yamlpath::MAX_DEPTH`] at parse time).
    pub fn from_value(v: &Value<'_>) -> Result<Y, Located> {
        let kind = if v.is_list() {
            Kind::L(v.list()?.iter().map(Y::from_value).collect::<Result<_, _>>()?)
        } else if v.is_mapping() {
            let m = v.mapping()?;
            let mut out = Vec::new();
            for (k, val) in m.entries() {
                out.push((k, Y::from_value(&val)?));
            }
            Kind::M(out)
        } else if v.is_null() {
            Kind::S(String::new())
        } else {
            Kind::S(v.text()?.to_string())
        };
        Ok(Y { pos: v.pos(), kind })
    }

    /// The value under `key` of a mapping.
    pub fn get(&self, key: &str) -> Option<&Y> {
        match &self.kind {
            Kind::M(e) => e.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The value under `key` of a mapping, to change.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Y> {
        match &mut self.kind {
            Kind::M(e) => e.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The text of a single value under `key`, if present and not empty.
    pub fn text(&self, key: &str) -> Option<&str> {
        match self.get(key).map(|y| &y.kind) {
            Some(Kind::S(s)) if !s.is_empty() => Some(s),
            _ => None,
        }
    }

    /// The items of a list under `key` (none when absent).
    pub fn items(&self, key: &str) -> &[Y] {
        match self.get(key).map(|y| &y.kind) {
            Some(Kind::L(l)) => l,
            _ => &[],
        }
    }

    /// Drops `key` from a mapping.
    pub fn remove(&mut self, key: &str) {
        if let Kind::M(e) = &mut self.kind {
            e.retain(|(k, _)| k != key);
        }
    }

    /// Renames `from` to `to` in a mapping, keeping its place.
    pub fn rename(&mut self, from: &str, to: &str) {
        if let Kind::M(e) = &mut self.kind {
            for (k, _) in e.iter_mut().filter(|(k, _)| k == from) {
                *k = to.to_string();
            }
        }
    }

    /// Sets `key` of a mapping (replacing it, or appended).
    pub fn set(&mut self, key: &str, v: Y) {
        if let Kind::M(e) = &mut self.kind {
            match e.iter_mut().find(|(k, _)| k == key) {
                Some((_, old)) => *old = v,
                None => e.push((key.to_string(), v)),
            }
        }
    }

    /// Appends to the list under `key` of a mapping, making the list if absent.
    pub fn push(&mut self, key: &str, v: Y) {
        if let Kind::M(e) = &mut self.kind {
            match e.iter_mut().find(|(k, _)| k == key) {
                Some((_, Y { kind: Kind::L(l), .. })) => l.push(v),
                Some((_, old)) => *old = Y::l(vec![v]),
                None => e.push((key.to_string(), Y::l(vec![v]))),
            }
        }
    }

    /// The node at a field path as control's errors write it (`vrs[2].interfaces[0].mac`), or
    /// the deepest one on the way there.
    pub fn at_path(&self, path: &str) -> &Y {
        let mut node = self;
        for part in path.split('.').filter(|p| !p.is_empty()) {
            let (key, rest) = part.split_once('[').unwrap_or((part, ""));
            if !key.is_empty() {
                // An interface's `link:` is written `switch:` in generated topologies.
                match node
                    .get(key)
                    .or_else(|| (key == "switch").then(|| node.get("link")).flatten())
                {
                    Some(n) => node = n,
                    None => return node,
                }
            }
            for idx in rest.split('[').map(|s| s.trim_end_matches(']')) {
                match (idx.parse::<usize>(), &node.kind) {
                    (Ok(i), Kind::L(l)) if i < l.len() => node = &l[i],
                    _ => return node,
                }
            }
        }
        node
    }

    /// Block YAML; every single value double-quoted (JSON's escapes are YAML's), so no value
    /// can change meaning on the way.
    pub fn emit(&self) -> String {
        let mut out = String::new();
        match &self.kind {
            Kind::M(e) if !e.is_empty() => emit_map(e, 0, &mut out),
            _ => {
                out.push_str(&flow(self));
                out.push('\n');
            }
        }
        out
    }
}

fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// A value written inline: a quoted text, or `[]`/`{}` for empty collections; other lists
/// and mappings are written as blocks by the callers.
fn flow(y: &Y) -> String {
    match &y.kind {
        Kind::S(s) if s.is_empty() => "~".into(),
        Kind::S(s) => quoted(s),
        Kind::L(_) => "[]".into(),
        Kind::M(_) => "{}".into(),
    }
}

fn is_block(y: &Y) -> bool {
    match &y.kind {
        Kind::L(l) => !l.is_empty(),
        Kind::M(m) => !m.is_empty(),
        Kind::S(_) => false,
    }
}

fn emit_map(e: &[(String, Y)], indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    for (k, v) in e {
        if is_block(v) {
            out.push_str(&format!("{pad}{k}:\n"));
            emit_block(v, indent + 2, out);
        } else {
            out.push_str(&format!("{pad}{k}: {}\n", flow(v)));
        }
    }
}

fn emit_block(y: &Y, indent: usize, out: &mut String) {
    match &y.kind {
        Kind::M(e) => emit_map(e, indent, out),
        Kind::L(items) => {
            let pad = " ".repeat(indent);
            for it in items {
                if is_block(it) {
                    // `- ` then the block, its first line on the dash's line.
                    let mut inner = String::new();
                    emit_block(it, indent + 2, &mut inner);
                    out.push_str(&format!("{pad}- {}", &inner[indent + 2..]));
                } else {
                    out.push_str(&format!("{pad}- {}\n", flow(it)));
                }
            }
        }
        Kind::S(_) => out.push_str(&format!("{}{}\n", " ".repeat(indent), flow(y))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Y {
        let doc = yamlpath::parse_document(text, "x").unwrap();
        Y::from_value(&Value::<Located>::root(&doc)).unwrap()
    }

    #[test]
    fn round_trip_keeps_every_value_and_positions() {
        let text = "a: 1\nb:\n  - { x: \"q\\\"uote\", y: [1, 2] }\n  - []\n  - - 3\n    - 4\nc: {}\nd:\ne: 'yes: no'\n";
        let y = parse(text);
        let again = parse(&y.emit());
        let strip = |y: &Y| Y::from_value_no_pos(y);
        assert_eq!(strip(&again), strip(&y), "{}", y.emit());
        assert_eq!(y.at_path("b[0].y[1]").pos, (3, 28));
        assert_eq!(y.at_path("b[0].nothere").pos, y.at_path("b[0]").pos);
        assert_eq!(y.text("e"), Some("yes: no"));
        assert_eq!(y.text("d"), None);
    }

    impl Y {
        fn from_value_no_pos(y: &Y) -> Y {
            let kind = match &y.kind {
                Kind::S(s) => Kind::S(s.clone()),
                Kind::L(l) => Kind::L(l.iter().map(Y::from_value_no_pos).collect()),
                Kind::M(m) => {
                    Kind::M(m.iter().map(|(k, v)| (k.clone(), Y::from_value_no_pos(v))).collect())
                }
            };
            Y { pos: (0, 0), kind }
        }
    }

    #[test]
    fn edits() {
        let mut y = parse("a: 1\nlink: l\n");
        y.rename("link", "switch");
        y.set("a", Y::s("2"));
        y.push("ports", Y::s("p"));
        y.push("ports", Y::s("q"));
        y.remove("nothing");
        assert_eq!(y.emit(), "a: \"2\"\nswitch: \"l\"\nports:\n  - \"p\"\n  - \"q\"\n");
    }
}
