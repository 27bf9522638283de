//! A compiled table as bytes and back: what lets a data plane that starts again forward with
//! the table it had before its RIB is rebuilt (the caller keeps the bytes in a checkpoint
//! file, with a checksum and a fingerprint of what the table was built from).
//!
//! The image holds the arrays as they are in memory (`top`, `blocks`, `nodes`, `leaves`, with
//! the geometry), little-endian. [`decode`] trusts nothing in it: every length is checked
//! against the bytes there are before anything is allocated, and every index a lookup could
//! follow (a block, a child node, a leaf run) and every next hop is checked, as is the depth
//! of the node tree, so a damaged image is refused instead of panicking or looping in a
//! worker. A refused image says what was wrong.

use crate::poptrie::{Corrupt, Geometry, NodeParts, Parts, LAYOUT};
use crate::{Key, NextHop, Poptrie};

/// Why an image was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("compiled IPv{family} table: {what}")]
pub struct CheckpointError {
    pub family: u8,
    pub what: String,
}

const NODE_BYTES: usize = 32;
const HEAD: usize = 4 + 8 + 4 * 4;

fn family<K: Key>() -> u8 {
    if K::BITS == 32 {
        4
    } else {
        6
    }
}

/// Appends the image of `t` to `out`.
pub fn encode<K: Key>(t: &Poptrie<K>, out: &mut Vec<u8>) {
    let p = t.to_parts();
    out.reserve(HEAD + 4 * (p.top.len() + p.blocks.len()) + NODE_BYTES * p.nodes.len());
    out.extend_from_slice(&[K::BITS, p.geo.top, p.geo.block, 0]);
    out.extend_from_slice(&(p.prefixes as u64).to_le_bytes());
    for n in [p.top.len(), p.blocks.len(), p.nodes.len(), p.leaves.len()] {
        out.extend_from_slice(&(n as u32).to_le_bytes());
    }
    p.top.iter().chain(&p.blocks).for_each(|w| out.extend_from_slice(&w.to_le_bytes()));
    for &(vector, leafvec, node_base, leaf_base, inline) in &p.nodes {
        out.extend_from_slice(&vector.to_le_bytes());
        out.extend_from_slice(&leafvec.to_le_bytes());
        out.extend_from_slice(&node_base.to_le_bytes());
        out.extend_from_slice(&leaf_base.to_le_bytes());
        inline.iter().for_each(|h| out.extend_from_slice(&h.to_le_bytes()));
    }
    p.leaves.iter().for_each(|h| out.extend_from_slice(&h.to_le_bytes()));
}

/// Reads bytes in order, refusing to read past the end.
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
}

/// The table at the start of `bytes` and how many bytes it took, for a VR with `next_hops`
/// adjacency slots (every next hop in it must be below that).
pub fn decode<K: Key>(
    bytes: &[u8],
    next_hops: usize,
) -> Result<(Poptrie<K>, usize), CheckpointError> {
    let bad = |what: String| CheckpointError { family: family::<K>(), what };
    let short = || bad(format!("ends early ({} bytes)", bytes.len()));
    let mut c = Cursor { b: bytes, at: 0 };
    let h = c.take(4).ok_or_else(short)?;
    if h[0] != K::BITS {
        return Err(bad(format!("holds a {}-bit table, not a {}-bit one", h[0], K::BITS)));
    }
    let geo = Geometry { top: h[1], block: h[2] };
    let prefixes = u64::from_le_bytes(c.take(8).ok_or_else(short)?.try_into().expect("8"));
    let mut n = [0usize; 4];
    for x in &mut n {
        *x = c.u32().ok_or_else(short)? as usize;
    }
    let [nt, nb, nn, nl] = n;
    // Lengths against the bytes there are, before anything is allocated for them.
    let need = 4 * (nt as u64 + nb as u64) + NODE_BYTES as u64 * nn as u64 + 2 * nl as u64;
    if need > (bytes.len() - c.at) as u64 {
        return Err(short());
    }
    let words = |c: &mut Cursor, k: usize| -> Vec<u32> {
        let s = c.take(4 * k).expect("length checked");
        s.chunks_exact(4).map(|w| u32::from_le_bytes(w.try_into().expect("4"))).collect()
    };
    let top = words(&mut c, nt);
    let blocks = words(&mut c, nb);
    let nodes: Vec<NodeParts> = c
        .take(NODE_BYTES * nn)
        .expect("length checked")
        .chunks_exact(NODE_BYTES)
        .map(|w| {
            let u64at = |i: usize| u64::from_le_bytes(w[i..i + 8].try_into().expect("8"));
            let u32at = |i: usize| u32::from_le_bytes(w[i..i + 4].try_into().expect("4"));
            let h = |i: usize| NextHop::from_le_bytes(w[i..i + 2].try_into().expect("2"));
            (u64at(0), u64at(8), u32at(16), u32at(20), [h(24), h(26), h(28), h(30)])
        })
        .collect();
    let leaves: Vec<NextHop> = c
        .take(2 * nl)
        .expect("length checked")
        .chunks_exact(2)
        .map(|w| NextHop::from_le_bytes(w.try_into().expect("2")))
        .collect();
    let p = Parts { geo, top, blocks, nodes, leaves, prefixes: prefixes as usize };
    check::<K>(&p, next_hops).map_err(|e| bad(e.0))?;
    let t = Poptrie::from_parts(p);
    // The batched walk reads nodes and leaves unchecked on the strength of this.
    t.indices_ok(0, None).map_err(|e| bad(e.0))?;
    Ok((t, c.at))
}

/// Whether a lookup in `p` stays inside its arrays, ends, and answers only next hops below
/// `next_hops`.
fn check<K: Key>(p: &Parts, next_hops: usize) -> Result<(), Corrupt> {
    let (leaf, block, inline, stride) = LAYOUT;
    let g = p.geo;
    // In u32: bytes from a file may add up past 255.
    let s = u32::from(g.top) + u32::from(g.block);
    if !(1..=24).contains(&g.top) || s > 32 || s > u32::from(K::BITS) {
        return Err(Corrupt(format!(
            "geometry {}+{} bits is not one a table is built with",
            g.top, g.block
        )));
    }
    let per = 1usize << g.block;
    if p.top.len() != 1 << g.top
        || (g.block == 0 && !p.blocks.is_empty())
        || !p.blocks.len().is_multiple_of(per)
    {
        return Err(Corrupt(format!(
            "direct arrays of {} and {} entries do not fit geometry {}+{}",
            p.top.len(),
            p.blocks.len(),
            g.top,
            g.block
        )));
    }
    if p.leaves.is_empty() {
        return Err(Corrupt("no leaf placeholder".to_string()));
    }
    let hop = |h: NextHop, at: &str| -> Result<(), Corrupt> {
        if usize::from(h) < next_hops {
            Ok(())
        } else {
            Err(Corrupt(format!(
                "{at}: next hop {h} is not one of the {next_hops} adjacency slots"
            )))
        }
    };
    for (i, &h) in p.leaves.iter().enumerate() {
        hop(h, &format!("leaf {i}"))?;
    }
    // Nodes reached from the direct entries, with their depth; a node reached twice (a table
    // is a forest) or too deep for the key is refused, so every walk ends.
    let max_depth = ((u32::from(K::BITS) - s) as usize).div_ceil(usize::from(stride));
    let mut todo: Vec<(u32, usize)> = Vec::new();
    let mut direct = |e: u32, at: &str| -> Result<(), Corrupt> {
        if e & leaf != 0 {
            hop(e as NextHop, at)
        } else if (e as usize) < p.nodes.len() {
            todo.push((e, 1));
            Ok(())
        } else {
            Err(Corrupt(format!("{at}: node {e} is past the {} nodes", p.nodes.len())))
        }
    };
    let nblocks = p.blocks.len() / per;
    for (i, &e) in p.top.iter().enumerate() {
        // As the lookup reads it: the block tag first.
        if e & block != 0 {
            if g.block == 0 || (e ^ block) as usize >= nblocks {
                return Err(Corrupt(format!(
                    "top entry {i}: block {} is not one of {nblocks}",
                    e ^ block
                )));
            }
        } else {
            direct(e, &format!("top entry {i}"))?;
        }
    }
    for (i, &e) in p.blocks.iter().enumerate() {
        direct(e, &format!("block entry {i}"))?;
    }
    let mut seen = vec![false; p.nodes.len()];
    while let Some((idx, depth)) = todo.pop() {
        let at = || format!("node {idx}");
        if depth > max_depth {
            return Err(Corrupt(format!("{}: deeper than a {}-bit key allows", at(), K::BITS)));
        }
        if std::mem::replace(&mut seen[idx as usize], true) {
            return Err(Corrupt(format!("{}: reached twice", at())));
        }
        let (vector, leafvec, node_base, leaf_base, inl) = p.nodes[idx as usize];
        for h in inl {
            hop(h, &at())?;
        }
        for k in 1..=vector.count_ones() {
            let child = node_base.wrapping_add(k);
            if child as usize >= p.nodes.len() {
                return Err(Corrupt(format!(
                    "{}: child {child} is past the {} nodes",
                    at(),
                    p.nodes.len()
                )));
            }
            todo.push((child, depth + 1));
        }
        for r in (inline as u32 + 1)..=leafvec.count_ones() {
            let l = leaf_base.wrapping_add(r);
            if l as usize >= p.leaves.len() {
                return Err(Corrupt(format!(
                    "{}: leaf {l} is past the {} leaves",
                    at(),
                    p.leaves.len()
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::naive::NaiveLpm;
    use crate::synthetic;
    use crate::testutil::check_against;
    use crate::{Fib, Rib};

    fn round_trip<K: Key>(rib: &Rib<K>, hops: usize) {
        let fib = Fib::from_rib(rib.clone());
        let mut bytes = Vec::new();
        encode(&fib.current(), &mut bytes);
        let (t, used) = decode::<K>(&bytes, hops).expect("own image");
        assert_eq!(used, bytes.len());
        assert_eq!(t.prefixes(), rib.len());
        let naive: NaiveLpm<K> = rib.iter().collect();
        check_against(&t, &naive, rib, 20_000, 7);
    }

    #[test]
    fn a_decoded_table_answers_like_the_compiled_one_at_every_prefix_boundary() {
        for n in [0, 100, 5000, 60_000] {
            let r4 = synthetic::ipv4(n, 300, n as u64 + 1);
            round_trip(&crate::testutil::routes_to_rib(&r4), 301);
            let r6: Rib<u128> = synthetic::ipv6(n, 300, n as u64 + 2)
                .iter()
                .map(|&(p, h)| (u128::from(p.addr()), p.prefix_len(), h))
                .collect();
            round_trip(&r6, 301);
        }
    }

    #[test]
    fn a_patched_table_round_trips_too() {
        let r4 = synthetic::ipv4(40_000, 50, 3);
        let mut fib = Fib::from_rib(crate::testutil::routes_to_rib(&r4));
        for (i, (p, _)) in r4.iter().enumerate().step_by(97) {
            fib.insert(u32::from(p.addr()), p.prefix_len(), 1 + (i % 40) as NextHop);
        }
        let mut bytes = Vec::new();
        encode(&fib.current(), &mut bytes);
        let (t, _) = decode::<u32>(&bytes, 51).unwrap();
        let naive: NaiveLpm<u32> = fib.rib().iter().collect();
        check_against(&t, &naive, fib.rib(), 20_000, 9);
    }

    fn image() -> Vec<u8> {
        let r4 = synthetic::ipv4(40_000, 50, 5);
        let mut bytes = Vec::new();
        encode(&Fib::from_rib(crate::testutil::routes_to_rib(&r4)).current(), &mut bytes);
        bytes
    }

    #[test]
    fn damage_is_refused_with_what_was_wrong() {
        let b = image();
        let e = decode::<u32>(&b, 10).unwrap_err().to_string();
        assert!(e.contains("is not one of the 10 adjacency slots"), "{e}");
        let e = decode::<u128>(&b, 51).unwrap_err().to_string();
        assert!(e.contains("32-bit table, not a 128-bit one"), "{e}");
        for cut in [0, 3, 20, b.len() / 2, b.len() - 1] {
            let e = decode::<u32>(&b[..cut], 51).unwrap_err().to_string();
            assert!(e.contains("ends early"), "cut at {cut}: {e}");
        }
        // Every node index and leaf base made to point far away: refused, never a panic.
        let nt = u32::from_le_bytes(b[12..16].try_into().unwrap()) as usize;
        let nb = u32::from_le_bytes(b[16..20].try_into().unwrap()) as usize;
        let nn = u32::from_le_bytes(b[20..24].try_into().unwrap()) as usize;
        assert!(nn > 0);
        let nodes = HEAD + 4 * (nt + nb);
        for field in [16, 20] {
            let mut d = b.clone();
            for k in 0..nn {
                let at = nodes + k * NODE_BYTES + field;
                d[at..at + 4].copy_from_slice(&0x7fff_0000u32.to_le_bytes());
            }
            let e = decode::<u32>(&d, 51).unwrap_err().to_string();
            assert!(e.contains("is past the"), "field {field}: {e}");
        }
        // A node that is its own child: a walk that would not end.
        let mut d = b.clone();
        d[nodes + 16..nodes + 20].copy_from_slice(&u32::MAX.to_le_bytes());
        d[nodes..nodes + 8].copy_from_slice(&1u64.to_le_bytes());
        assert!(decode::<u32>(&d, 51).is_err());
        // A bad geometry and a block tag where there are no blocks.
        let mut d = b.clone();
        d[1] = 30;
        assert!(decode::<u32>(&d, 51).unwrap_err().to_string().contains("geometry"));
        // Bits that overflow a byte when added (found by the `checkpoint` fuzz target: the sum
        // wrapped to a geometry that passed).
        let mut d = b.clone();
        (d[1], d[2]) = (20, 250);
        assert!(decode::<u32>(&d, 51).unwrap_err().to_string().contains("geometry"));
        let e = decode::<u32>(&b, 51).unwrap();
        assert_eq!(e.1, b.len());
    }
}
