//! Threaded NAPI under an AF_XDP port, pinned to the CPUs of the worker that drives the port.
//!
//! Why: on veth there is no interrupt. The XDP program and its copy into the UMEM run in the
//! receiving veth's NAPI, which the *sender's* transmit schedules, so by default that work is
//! done on the sender's CPU (a traffic generator's, say), not on the router's. With threaded
//! NAPI (`/sys/class/net/DEV/threaded`, which veth accepts once an XDP program gives it a NAPI)
//! the poll runs in a kernel thread `napi/DEV-ID` instead, and routeplex pins that thread to the
//! CPUs its own worker may use: the router's kernel work is then paid on the router's CPU, as
//! RPS does for the Linux stack. Real NICs have IRQs to steer and keep their own settings.
//!
//! Only where the interface is visible in this process's sysfs (its namespace is the one sysfs
//! was mounted for, as under `ip netns exec`); elsewhere the port runs without it. The previous
//! `threaded` value is restored when the port closes.

use std::path::PathBuf;

use crate::sys::{self, CpuMask};

/// Threaded NAPI turned on for one interface, and where its kernel threads are pinned.
pub(super) struct ThreadedNapi {
    ifname: String,
    path: PathBuf,
    /// What `threaded` held before, restored on drop when it differs.
    was: String,
    /// The NAPI kernel threads found (pids), empty until found.
    tids: Vec<i32>,
    pinned_to: Option<CpuMask>,
}

impl ThreadedNapi {
    /// Turns threaded NAPI on for `ifname`; `None` if sysfs does not show the interface or the
    /// kernel refuses (no NAPI: SKB-mode XDP on veth, say).
    pub(super) fn enable(ifname: &str) -> Option<ThreadedNapi> {
        let path = PathBuf::from(format!("/sys/class/net/{ifname}/threaded"));
        let was = std::fs::read_to_string(&path).ok()?.trim().to_string();
        if was != "1" {
            std::fs::write(&path, "1").ok()?;
        }
        Some(ThreadedNapi {
            ifname: ifname.to_string(),
            path,
            was,
            tids: Vec::new(),
            pinned_to: None,
        })
    }

    /// Pins the NAPI threads to the CPUs the calling thread (the port's worker) may use, when
    /// those changed since the last call. Control path: about once a millisecond.
    pub(super) fn follow(&mut self) {
        let Ok(mine) = sys::thread_affinity() else { return };
        if self.pinned_to == Some(mine) {
            return;
        }
        if self.tids.is_empty() {
            self.tids = napi_threads(&self.ifname);
        }
        if self.tids.is_empty() {
            return;
        }
        if self.tids.iter().all(|&t| sys::set_affinity(t, &mine).is_ok()) {
            self.pinned_to = Some(mine);
        } else {
            // A thread went (NAPI re-created): look again next time.
            self.tids.clear();
        }
    }

    /// The NAPI kernel threads, once found and pinned.
    pub(super) fn pinned_threads(&self) -> &[i32] {
        if self.pinned_to.is_some() {
            &self.tids
        } else {
            &[]
        }
    }
}

impl Drop for ThreadedNapi {
    fn drop(&mut self) {
        if self.was != "1" {
            let _ = std::fs::write(&self.path, &self.was);
        }
    }
}

/// Kernel threads named `napi/IFNAME-ID` (the name cut at 15 bytes, as the kernel keeps it).
fn napi_threads(ifname: &str) -> Vec<i32> {
    let want = format!("napi/{ifname}-");
    let want = &want.as_bytes()[..want.len().min(15)];
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read(format!("/proc/{pid}/comm")).is_ok_and(|c| c.starts_with(want)))
        .collect()
}
