//! What a hung call costs faultd in memory. A brownout that hangs every call can leave tens of thousands of calls
//! held at once, so each must be cheap: the budget is 10 KB of RSS per held call (bench/faultd.md measures RSS at
//! 1k/5k/19k). RSS is too noisy for a test, so this binary counts the heap bytes live in the process with a
//! counting global allocator instead: deterministic, and a lower bound of RSS. hyper alone keeps an 8 KiB read
//! buffer and an 8 KiB write buffer per connection, so a hung call still served by hyper costs over 16 KiB here.
//!
//! This file is its own test binary with a single test, so no other test allocates while it measures.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use common::wait_for;
use faultd::{Config, Options};

/// Counts the bytes the process has live on the heap.
struct CountingAllocator;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            LIVE_BYTES.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Hung calls held at once while measuring: enough that per-process constants (a recorder bucket, a lazily grown
/// table) vanish in the division, few enough for a 2-core machine's test run.
const HELD: usize = 500;

/// The heap a held call may cost. The RSS budget is 10 KB; heap bytes are a lower bound of RSS (the allocator
/// rounds chunks up and a page is resident as soon as one byte of it is), so the heap budget keeps most of that
/// room free: 4 KiB.
const HEAP_BUDGET_PER_HELD_CALL: isize = 4096;

/// Opens `n` connections with one hung request each. Blocking std sockets, so the client side allocates nothing
/// on the heap that would be counted as faultd's.
async fn hold(addr: std::net::SocketAddr, n: usize) -> Vec<std::net::TcpStream> {
    tokio::task::spawn_blocking(move || {
        (0..n)
            .map(|i| {
                let mut s = std::net::TcpStream::connect(addr).unwrap();
                s.write_all(format!("GET /hang/{i} HTTP/1.1\r\nHost: faultd\r\n\r\n").as_bytes())
                    .unwrap();
                s
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap()
}

/// The live heap once it has settled: within `STEADY` bytes over five readings 20 ms apart (100 ms in which no
/// connection moved), waiting at most 10 s for it.
async fn settled_heap(when: &str) -> isize {
    const STEADY: isize = 1024;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut last = LIVE_BYTES.load(Ordering::Relaxed);
    let mut steady_readings = 0;
    while steady_readings < 5 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = LIVE_BYTES.load(Ordering::Relaxed);
        steady_readings = if (now - last).abs() <= STEADY {
            steady_readings + 1
        } else {
            0
        };
        last = now;
        assert!(
            std::time::Instant::now() < deadline,
            "the heap did not settle {when} within 10 s ({now} bytes live)"
        );
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_call_holds_under_four_kib_of_heap_and_still_ends_as_a_hang() {
    let config = Config::from_yaml(
        "routes:\n  hang: { path: /hang/*, hang: 100% }\n",
        "hang.yaml",
    )
    .unwrap();
    let f = faultd::start(config, Options::default()).await.unwrap();
    f.start_schedule(tokio::time::Instant::now());
    let addr = f.data_addr();

    // Warm up: the runtime's worker state, the I/O driver's slabs and the recorder's first buckets are allocated
    // once, not per call.
    let warm = hold(addr, 50).await;
    wait_for("the warm-up calls in flight", || f.in_flight() == 50).await;
    drop(warm);
    wait_for("the warm-up calls to leave", || f.in_flight() == 0).await;

    let before = settled_heap("after the warm-up").await;
    let held = hold(addr, HELD).await;
    wait_for("every call in flight", || f.in_flight() == HELD as u64).await;
    // Every connection at its resting state (request parsed, call decided, socket taken back).
    let during = settled_heap("with every call held").await;
    let per_call = (during - before) / HELD as isize;
    eprintln!("a held call costs {per_call} bytes of heap");
    assert!(
        per_call <= HEAP_BUDGET_PER_HELD_CALL,
        "a held call costs {per_call} bytes of heap (budget {HEAP_BUDGET_PER_HELD_CALL})"
    );

    // Still held: no byte and no close reached any client.
    let mut first = held[0].try_clone().unwrap();
    first.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    assert_eq!(
        first.read(&mut byte).map_err(|e| e.kind()),
        Err(std::io::ErrorKind::WouldBlock)
    );

    // The clients give up: every call leaves and counts as a hang, exactly as before the socket was taken back.
    drop(first);
    drop(held);
    wait_for("every hung call to leave", || f.in_flight() == 0).await;
    let r = f.recording();
    assert_eq!(r.routes["hang"].totals.hangs, (HELD + 50) as u64);
    assert_eq!(r.routes["hang"].max_in_flight, HELD as u64);
    f.shutdown().await;
}
