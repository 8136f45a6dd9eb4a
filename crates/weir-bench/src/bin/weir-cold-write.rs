//! `weir-cold-write [SIZE_KB]`: what storing one answer costs in memory alone, the floor under
//! a cache miss. It copies a SIZE_KB (default 8) body, as the cache does into a new stored
//! answer, into a ring of slots last written one ring ago, for rings from 1 MiB to 512 MiB
//! (the bench's cache), and prints the time per copy beside the same copy into one slot that
//! stays in the CPU's caches. Pin it to a core (`taskset -c 0`) for steady numbers.
#![forbid(unsafe_code)]

use std::hint::black_box;
use std::time::Instant;

/// Copies per measurement: enough to cycle the largest ring several times.
const COPIES: usize = 400_000;

fn main() {
    let size_kb: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(8);
    let size = size_kb << 10;
    let body: Vec<u8> = (0..size).map(|i| i as u8).collect();
    println!("copy of {size_kb} KiB into memory last written one ring ago (µs per copy)");
    let hot = per_copy(&body, 1);
    println!("{:>8}  {hot:.3}", "hot");
    for ring_mib in [1usize, 2, 4, 8, 16, 32, 64, 128, 256, 512] {
        let slots = ((ring_mib << 20) / size).max(1);
        let took = per_copy(&body, slots);
        println!(
            "{:>5} MiB  {took:.3}  (+{:.3} over hot)",
            ring_mib,
            took - hot
        );
    }
}

/// Microseconds per copy of `body` into `slots` slots taken in turn, after one warm-up pass
/// that faults every slot in.
fn per_copy(body: &[u8], slots: usize) -> f64 {
    let mut ring = vec![0u8; slots * body.len()];
    let slot_of = |i: usize| {
        let start = (i % slots) * body.len();
        start..start + body.len()
    };
    for i in 0..slots {
        ring[slot_of(i)].copy_from_slice(body);
    }
    let started = Instant::now();
    for i in 0..COPIES {
        let range = slot_of(i);
        ring[range.clone()].copy_from_slice(black_box(body));
        black_box(&ring[range.start]);
    }
    started.elapsed().as_secs_f64() * 1e6 / COPIES as f64
}
