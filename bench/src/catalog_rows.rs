//! What one service instance costs in the catalog's tables, and how long a
//! snapshot of a large catalog takes to write and to restore.
//!
//! The tables are built in this process through the same commands Raft
//! applies, and a counting allocator measures the heap they hold: bytes per
//! instance are exact, without the Raft log, the allocator's slack or the
//! rest of an agent that an RSS figure would include.
//!
//! `legate-catalog-rows --instances 100000` registers that many instances
//! of 100 services over `instances / 50` nodes, each with the tags, meta
//! and one health check a typical registration carries; every tenth is a
//! connect-proxy sidecar instead. `--without-checks` leaves the checks out,
//! to measure the service rows alone.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use legate_state::{Command, StateStore};
use legate_types::catalog::{
    ConnectProxyConfig, HealthCheck, HealthStatus, NodeService, RegisterRequest, Upstream,
};

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// The registration of instance `i`.
fn registration(i: usize, nodes: usize, with_checks: bool) -> RegisterRequest {
    let node = format!("node-{:05}", i % nodes);
    let name = format!("service-{:03}", i % 100);
    let id = format!("{name}-{i}");
    let mut service = NodeService {
        id: id.clone(),
        service: name.clone(),
        tags: vec!["v1".into(), "primary".into()],
        port: 8000 + (i % 1000) as u16,
        address: format!("10.{}.{}.{}", i / 65536 % 256, i / 256 % 256, i % 256),
        ..Default::default()
    };
    service.meta.insert("version".into(), "1.4.2".into());
    service.meta.insert("team".into(), "payments".into());
    let mut request = RegisterRequest {
        node: node.clone(),
        address: format!("192.168.{}.{}", i % nodes / 256, i % nodes % 256),
        service: Some(service),
        check: Some(HealthCheck {
            node: node.clone(),
            check_id: format!("service:{id}"),
            name: format!("Service '{name}' check"),
            status: HealthStatus::Passing,
            service_id: id.clone(),
            service_name: name.clone(),
            ..Default::default()
        }),
        ..Default::default()
    };
    if !with_checks {
        request.check = None;
    }
    if i % 10 == 9 {
        // Every tenth registration is a sidecar instead.
        let service = request.service.as_mut().expect("set above");
        service.kind = "connect-proxy".into();
        service.id = format!("{id}-sidecar-proxy");
        service.service = format!("{name}-sidecar-proxy");
        service.proxy = Some(Box::new(ConnectProxyConfig {
            destination_service_name: name.clone(),
            destination_service_id: id.clone(),
            local_service_address: "127.0.0.1".into(),
            local_service_port: 8080,
            upstreams: std::sync::Arc::new(vec![Upstream {
                destination_name: "db".into(),
                local_bind_port: 9191,
                ..Default::default()
            }]),
            ..Default::default()
        }));
        request.check = None;
    }
    request
}

fn main() {
    let instances: usize = std::env::args()
        .skip_while(|a| a != "--instances")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000);
    // `--without-checks`: the service rows alone.
    let with_checks = !std::env::args().any(|a| a == "--without-checks");
    let nodes = (instances / 50).max(1);
    let store = StateStore::new();
    let before = live();
    for i in 0..instances {
        let command = Command::Register(Box::new(registration(i, nodes, with_checks)));
        store.apply(i as u64 + 10, &command);
    }
    let held = live() - before;
    let started = Instant::now();
    let snapshot = store.snapshot().expect("snapshot");
    let snapshot_ms = started.elapsed().as_secs_f64() * 1e3;
    let restored = StateStore::new();
    let before_restore = live();
    let started = Instant::now();
    restored.restore(&snapshot).expect("restore");
    let restore_ms = started.elapsed().as_secs_f64() * 1e3;
    let held_restored = live() - before_restore;
    assert_eq!(
        restored.read().services().1.len(),
        store.read().services().1.len(),
        "the restored catalog lists the same services"
    );
    println!(
        "instances={instances} nodes={nodes} checks={with_checks} bytes_per_instance={:.0} bytes_per_instance_restored={:.0} snapshot_bytes={} snapshot_ms={snapshot_ms:.0} restore_ms={restore_ms:.0}",
        held as f64 / instances as f64,
        held_restored as f64 / instances as f64,
        snapshot.len(),
    );
}
