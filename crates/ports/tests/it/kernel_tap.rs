//! Tap ports, checked against an AF_PACKET port on the same interface: what the tap port sends
//! the kernel receives on the interface, and what is sent out of the interface the tap port
//! receives (root only; skipped with a printed reason otherwise).
//!
//! Covers: every byte and counter both ways in bursts of 1, 2 and 257 for a created and an
//! attached tap; a created tap vanishing with its port and an attached one staying; clear
//! errors (name taken, no such tap, not a tap); writes to a down tap counted as errors; the
//! interface deleted under an open port (down, no panic) and, for an attached port, re-attached
//! when the tap comes back; jumbo frames (MTU 9000) both ways.

use crate::common_kernel;

use common_kernel::*;
use ports::afpacket::{AfPacketOptions, AfPacketPort};
use ports::tap::TapPort;
use ports::{Batch, Port, PortStatus};

/// Deletes the interface on drop, for taps the test created through the port.
struct Del(String);
impl Drop for Del {
    fn drop(&mut self) {
        ip_quiet(&["link", "del", &self.0]);
    }
}

fn exists(dev: &str) -> bool {
    ip_quiet(&["link", "show", "dev", dev])
}

#[test]
fn tap_created_moves_every_byte_and_goes_with_its_port() {
    if !root_or_skip("tap_created_moves_every_byte_and_goes_with_its_port") {
        return;
    }
    let name = unique("t");
    let _g = Del(name.clone());
    let mut t = TapPort::create(&name).unwrap();
    assert!(exists(&name));
    // Down until someone brings it up: writes are refused and counted, not taken silently.
    let mut b = Batch::new(1);
    b.push_copy(&frame(1, 0, 60, None));
    assert_eq!(t.tx_burst(&mut b, &[0]), 1);
    assert_eq!(t.stats().tx_errors, 1);

    let e = TapPort::create(&name).err().expect("name is taken");
    assert!(e.to_string().starts_with(&format!("tap {name}: ioctl(TUNSETIFF): ")), "{e}");

    quiet(&name, None);
    up(&name, None);
    let mut p = AfPacketPort::open(&name, &AfPacketOptions::default()).unwrap();
    workout(&mut t, &mut p);
    drop(p);
    drop(t);
    // The kernel unregisters the device once the last reference (the packet socket's, freed
    // after an RCU grace period) goes: on a loaded machine that can take a moment.
    let t0 = std::time::Instant::now();
    while exists(&name) && t0.elapsed() < std::time::Duration::from_secs(3) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!exists(&name), "a created tap goes with its port");
}

#[test]
fn tap_attached_moves_every_byte_and_stays() {
    if !root_or_skip("tap_attached_moves_every_byte_and_stays") {
        return;
    }
    let tap = PersistentTap::new();
    up(&tap.name, None);
    let mut t = TapPort::attach(&tap.name).unwrap();
    let mut p = AfPacketPort::open(&tap.name, &AfPacketOptions::default()).unwrap();
    workout(&mut t, &mut p);
    drop(t);
    assert!(exists(&tap.name), "an attached tap stays");

    let e = TapPort::attach("rpx-nosuchtap").err().unwrap();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    assert_eq!(e.to_string(), "tap rpx-nosuchtap: no such interface");
    let v = Veth::new();
    let e = TapPort::attach(&v.a).err().unwrap();
    assert!(e.to_string().contains("not a tap"), "{e}");
}

#[test]
fn tap_removed_under_the_port() {
    if !root_or_skip("tap_removed_under_the_port") {
        return;
    }
    // Created: deleted by someone else, the port goes down and stays down.
    let name = unique("t");
    let _g = Del(name.clone());
    let mut t = TapPort::create(&name).unwrap();
    up(&name, None);
    ip(&["link", "del", &name]);
    let mut b = Batch::new(2);
    b.push_copy(&frame(1, 0, 60, None));
    b.push_copy(&frame(1, 1, 60, None));
    let mut inb = Batch::new(8);
    assert_eq!(t.rx_burst(&mut inb), 0);
    assert_eq!(t.tx_burst(&mut b, &[0, 1]), 0);
    assert_eq!(t.status(), PortStatus::Down(format!("interface {name} disappeared")));
    ip(&["tuntap", "add", "dev", &name, "mode", "tap"]);
    for _ in 0..50 {
        t.service();
        std::thread::sleep(std::time::Duration::from_millis(4));
    }
    assert_ne!(t.status(), PortStatus::Up, "a created tap is not re-created or adopted");

    // Attached: deleted and re-made, the port re-attaches.
    let tap = PersistentTap::new();
    up(&tap.name, None);
    let mut t = TapPort::attach(&tap.name).unwrap();
    ip(&["link", "del", &tap.name]);
    service_until(&mut t, "down", |p| p.status() != PortStatus::Up);
    assert_eq!(t.tx_burst(&mut b, &[0]), 0);
    ip(&["tuntap", "add", "dev", &tap.name, "mode", "tap"]);
    quiet(&tap.name, None);
    up(&tap.name, None);
    service_until(&mut t, "re-attached", |p| p.status() == PortStatus::Up);
    let mut p = AfPacketPort::open(&tap.name, &AfPacketOptions::default()).unwrap();
    workout(&mut t, &mut p);
}

/// A tap port's file is what a sleeping worker polls: readable when a frame comes in.
#[test]
fn tap_wakes_a_sleeper_when_a_frame_arrives() {
    if !root_or_skip("tap_wakes_a_sleeper_when_a_frame_arrives") {
        return;
    }
    let name = unique("t");
    let _g = Del(name.clone());
    let mut t = TapPort::create(&name).unwrap();
    quiet(&name, None);
    up(&name, None);
    let mut p = AfPacketPort::open(&name, &AfPacketOptions::default()).unwrap();
    wakes(&mut p, &mut t);
}

/// As in kernel_cross.rs.
fn wakes(tx: &mut dyn Port, rx: &mut dyn Port) {
    use ports::wait::Poller;
    use std::time::{Duration, Instant};
    let mut fds = Vec::new();
    assert!(rx.wakeup_fds(&mut fds));
    assert_eq!(fds.len(), 1, "{fds:?}");
    let run = run_id();
    let mut b = Batch::new(1);
    b.push_copy(&frame(run, 1, 60, None));
    assert_eq!(tx.tx_burst(&mut b, &[0]), 1);
    let mut poller = Poller::new();
    let mut r = Batch::new(64);
    let t0 = Instant::now();
    loop {
        assert!(t0.elapsed() < Duration::from_secs(20), "never woke for the frame");
        if poller.wait(&fds, Duration::from_secs(1)).unwrap() == 0 {
            continue;
        }
        r.clear();
        rx.rx_burst(&mut r);
        if r.packets().iter().any(|f| parse(f.frame()) == Some((run, 1))) {
            break;
        }
    }
}

#[test]
fn tap_jumbo_frames_both_ways() {
    if !root_or_skip("tap_jumbo_frames_both_ways") {
        return;
    }
    let tap = PersistentTap::new();
    set_mtu(&tap.name, None, 9000);
    up(&tap.name, None);
    let mut t = TapPort::attach(&tap.name).unwrap();
    let mut p = AfPacketPort::open(&tap.name, &AfPacketOptions::default()).unwrap();
    jumbo_workout(&mut t, &mut p);
    assert_eq!(t.stats().rx_dropped + p.stats().rx_dropped, 0);
}
