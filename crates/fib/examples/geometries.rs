//! Lookup rate of the real table (or a prefix file) under several direct-pointing
//! geometries: `cargo run --release -p fib --example geometries -- [ipv4|ipv6] [top+block ...]`.
//! For choosing `poptrie::geometry_for`; every run is checked against the naive table.

use fib::bench::{BenchOptions, Routes};
use fib::poptrie::Geometry;
use fib::prefix_file::{self, Family};

fn main() {
    let mut args = std::env::args().skip(1);
    let fam = match args.next().as_deref() {
        Some("ipv4") => Family::Ipv4,
        _ => Family::Ipv6,
    };
    let path = prefix_file::cached(fam).expect("no cached table: run scripts/fetch-prefixes");
    let list = prefix_file::load(&path).expect("prefix file");
    let geos: Vec<Option<Geometry>> = {
        let g: Vec<_> = args
            .map(|a| {
                let (t, b) = a.split_once('+').expect("top+block");
                Some(Geometry { top: t.parse().unwrap(), block: b.parse().unwrap() })
            })
            .collect();
        if g.is_empty() {
            vec![None]
        } else {
            g
        }
    };
    for g in geos {
        // ADDRS=n: a smaller address set (repeated) shows the rate when the touched part of
        // the table stays in cache.
        let addresses: usize =
            std::env::var("ADDRS").ok().and_then(|v| v.parse().ok()).unwrap_or(1 << 22);
        let rounds = ((20usize << 20) / addresses).clamp(5, 10_000);
        let opts = BenchOptions {
            geometry: g,
            rounds,
            addresses,
            updates: 0,
            scalar: false,
            ..Default::default()
        };
        let r = fib::bench::run(Routes::from_list(&list, fam), &opts);
        println!(
            "{:?}: {:.1} M/s per CPU second ({:.1} M/s wall, best round {:.1}, on CPU {:.0} %), {:.2} MiB, depth {}, nodes {}, mismatches {}",
            g.map(|g| (g.top, g.block)),
            r.cpu_lookups_per_sec / 1e6,
            r.lookups_per_sec / 1e6,
            r.best_round_lookups_per_sec / 1e6,
            r.cpu_share * 100.0,
            r.table_bytes as f64 / 1048576.0,
            r.max_depth,
            r.nodes,
            r.mismatches
        );
    }
}
