//! Lookup benchmark on the real prefix set (or a synthetic one when it is not cached).
//!
//! `cargo run --release -p fib --example fib_bench -- [ipv4|ipv6] [batch] [geometry] [rounds] [quick] [addresses]`
//! (`geometry`: `18` or `12+12` direct bits, `0` for the FIB's choice; `quick`: skip the oracle check and update timing).
//! Prints the `fib::bench` report as JSON lines: the same numbers `routeplex bench fib` shows.

use fib::bench::{self, BenchOptions, Routes};
use fib::prefix_file::{self, Family, PrefixList};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let families: Vec<Family> = match args.first() {
        Some(f) => vec![f.parse().unwrap_or_else(|e| panic!("{e}"))],
        None => vec![Family::Ipv4, Family::Ipv6],
    };
    let batch = args.get(1).map_or(256, |b| b.parse().expect("batch"));
    let geometry = args.get(2).filter(|g| *g != "0").map(|g| {
        let (t, b) = g.split_once('+').unwrap_or((g, "0"));
        fib::poptrie::Geometry {
            top: t.parse().expect("top bits"),
            block: b.parse().expect("block bits"),
        }
    });
    let rounds = args.get(3).map_or(10, |r| r.parse().expect("rounds"));
    let quick = args.get(4).is_some_and(|q| q == "quick");
    let addresses = args.get(5).map_or(1 << 22, |a| a.parse().expect("addresses"));
    for family in families {
        let list = match prefix_file::cached(family) {
            Some(p) => {
                eprintln!("using {}", p.display());
                prefix_file::load(&p).unwrap_or_else(|e| panic!("{e}"))
            }
            None => {
                eprintln!("real table not cached (run scripts/fetch-prefixes): synthetic");
                let mut l = PrefixList::default();
                match family {
                    Family::Ipv4 => {
                        l.v4 = fib::synthetic::ipv4(500_000, 256, 1)
                            .into_iter()
                            .map(|(n, nh)| (n, u32::from(nh)))
                            .collect()
                    }
                    Family::Ipv6 => {
                        l.v6 = fib::synthetic::ipv6(135_000, 256, 1)
                            .into_iter()
                            .map(|(n, nh)| (n, u32::from(nh)))
                            .collect()
                    }
                }
                l
            }
        };
        let mut opts = BenchOptions { batch, geometry, rounds, addresses, ..Default::default() };
        if quick {
            opts.check = false;
            opts.updates = 0;
        }
        let r = bench::run(Routes::from_list(&list, family), &opts);
        println!("{}", r.to_json());
        eprintln!(
            "{family}: {} prefixes, {:.1} M lookups/s batched ({:.2} ns; best round {:.1}), {:.1} M/s scalar, \
             {:.2} MiB, build {:.1} ms, s={}+{}, depth {}, mismatches {}/{}, update {:.0} us, batch {:.1} us/change",
            r.prefixes,
            r.lookups_per_sec / 1e6,
            r.ns_per_lookup,
            r.best_round_lookups_per_sec / 1e6,
            r.scalar_lookups_per_sec / 1e6,
            r.table_bytes as f64 / (1 << 20) as f64,
            r.build_ms,
            r.direct_bits - r.block_bits,
            r.block_bits,
            r.max_depth,
            r.mismatches,
            r.checked,
            r.update_us,
            r.batch_update_us_per_change,
        );
    }
}
