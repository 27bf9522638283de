//! A stock QEMU guest on a VR's vhost-user port: a Debian cloud kernel with a busybox
//! initramfs (built at run time into a cache by `tester::vm`, never committed) boots under
//! TCG (KVM where the CPU has it), its virtio-net driver sets up the rings over vhost-user,
//! it pings the VR, then exchanges UDP request/response datagrams *through* the VR with a
//! responder on the VR's other interface. Skips, saying why, only when QEMU cannot run at all.

use std::path::Path;
use std::time::{Duration, Instant};

use control::build;
use control::Topology;
use ports::{Batch, Port, PortStatus};
use tester::vm::{GuestImage, Nic, Qemu};

const GUEST_MAC: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];

/// A private scratch directory, removed with everything in it on drop.
struct Scratch(std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Turns a UDP datagram to 10.1.0.2:9999 around (addresses and ports swapped: both checksums
/// stay right). Returns the request's payload, or `None` for anything else.
fn echo(f: &mut [u8]) -> Option<Vec<u8>> {
    if f.len() < 42 || f[12..14] != [8, 0] || f[14] != 0x45 || f[23] != 17 {
        return None;
    }
    if f[30..34] != [10, 1, 0, 2] || f[36..38] != 9999u16.to_be_bytes() {
        return None;
    }
    let payload = f[42..].to_vec();
    let (dst, src) = f.split_at_mut(6);
    dst.swap_with_slice(&mut src[..6]);
    let (a, b) = f[26..34].split_at_mut(4);
    a.swap_with_slice(b);
    let (a, b) = f[34..38].split_at_mut(2);
    a.swap_with_slice(b);
    Some(payload)
}

#[test]
fn a_qemu_guest_pings_the_vr_and_exchanges_udp_through_it() {
    guest_through_a_vr(false, 100);
}

/// The other socket mode: QEMU listens (`server=on`), the port connects (`mode: client`).
#[test]
fn a_qemu_guest_that_listens_is_reached_by_a_client_port() {
    guest_through_a_vr(true, 20);
}

/// The guest runs one at a time: each TCG guest takes a whole CPU for its few seconds.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn guest_through_a_vr(qemu_listens: bool, n: u32) {
    if let Some(why) = tester::vm::qemu_unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let _g = serial();
    let image = GuestImage::ensure().unwrap_or_else(|e| panic!("building the guest image: {e}"));
    let dir = Scratch(std::env::temp_dir().join(format!(
        "rvh-qemu-{}-{}",
        std::process::id(),
        if qemu_listens { "c" } else { "s" }
    )));
    std::fs::create_dir_all(&dir.0).unwrap();
    let sock = dir.0.join("vm0.sock");
    let yaml = format!(
        "ports:\n  - {{ name: vm0, kind: vhost-user, socket: {}, mode: {} }}\n  - {{ name: out, kind: mem }}\n\
         vrs:\n  - name: rvhvr\n    interfaces:\n\
         \x20     - {{ name: e0, port: vm0, mac: 02:00:00:00:0a:01, addresses: [10.0.0.1/24] }}\n\
         \x20     - {{ name: e1, port: out, mac: 02:00:00:00:0b:01, addresses: [10.1.0.1/24] }}\n\
         \x20   neighbors:\n\
         \x20     - {{ address: 10.1.0.2, mac: 02:00:00:00:0b:02, interface: e1 }}\n",
        sock.display(),
        if qemu_listens { "client" } else { "server" }
    );
    let topo = Topology::parse(&yaml, "vm.yaml", Path::new(".")).unwrap();
    let mut built = build::engine(&topo, None).unwrap();
    let mut out = built.take_outside(&topo, "out").unwrap();
    let vm0 = topo.port_index("vm0").unwrap();
    assert!(matches!(built.engine.cell().port_status(vm0), PortStatus::Down(_)));

    let nic = Nic { socket: sock.clone(), mac: GUEST_MAC, qemu_listens, queues: 1 };
    let append =
        format!("rvh.role=ping rvh.ip0=10.0.0.2/24 rvh.gw=10.0.0.1 rvh.udp=10.1.0.2 rvh.n={n}");
    let mut qemu = Qemu::spawn(&image, &[nic], &append, 256).unwrap();
    let t0 = Instant::now();
    let mut seen = std::collections::BTreeSet::new();
    let (mut echoed, mut up_at) = (0u64, None);
    let mut rx = Batch::new(64);
    let exit = loop {
        let now = t0.elapsed().as_nanos() as u64;
        let mut work = built.engine.poll(now);
        rx.clear();
        work += out.rx_burst(&mut rx);
        let mut sel = Vec::new();
        for i in 0..rx.len() {
            if let Some(p) = echo(rx.get_mut(i).frame_mut()) {
                seen.insert(p);
                sel.push(i as u16);
            }
        }
        echoed += out.tx_burst(&mut rx, &sel) as u64;
        if up_at.is_none() && built.engine.cell().port_status(vm0) == PortStatus::Up {
            up_at = Some(t0.elapsed());
        }
        if let Some(st) = qemu.try_wait() {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(150),
            "guest did not finish in 150 s ({:?}); port {:?}\n{}",
            qemu.accel,
            built.engine.cell().port_status(vm0),
            qemu.log()
        );
        if work == 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
    };
    let lines = qemu.rvh_lines();
    let log = qemu.log();
    eprintln!(
        "guest ({:?}) up at {:?}, exited after {:?}: {lines:?}",
        qemu.accel,
        up_at,
        t0.elapsed()
    );
    assert!(exit.success(), "qemu exit {exit}\n{log}");
    assert!(up_at.is_some(), "the port never came up\n{log}");
    assert!(lines.iter().any(|l| l == "ping rc=0"), "ping failed\n{log}");
    let want = format!("rvhx sent={n} echoed={n}");
    assert!(lines.iter().any(|l| l.starts_with(&want)), "UDP through the VR: {lines:?}\n{log}");
    assert!(lines.iter().any(|l| l == "done"), "{log}");
    // Every datagram came through the VR (retries may repeat some; none is missing).
    assert_eq!(seen.len(), n as usize, "distinct requests seen by the responder");
    assert!(echoed >= n as u64);
    let s = built.engine.cell().port_stats(vm0);
    // ARP, 3 pings and N datagrams at least came from the guest; as many went back.
    assert!(s.rx_packets >= n as u64 + 4 && s.tx_packets >= n as u64 + 4, "{s:?}");
    assert_eq!((s.rx_dropped, s.tx_errors), (0, 0), "{s:?}");
}
