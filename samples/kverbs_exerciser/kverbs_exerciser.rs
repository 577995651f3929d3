// SPDX-License-Identifier: GPL-2.0

//! kverbs_exerciser: a seeded, randomized driver of the kverbs safe API.
//!
//! The self-test (kverbs_selftest) checks what the layer refuses case by
//! case; this module drives the API the way an unknown caller would. Each
//! step makes one call of the safe API with arguments drawn from a pool of
//! live objects of every kind the pool keeps (PDs, CQs of each poll
//! context, RC QPs in RESET, INIT, RTS and ERROR, UD QPs, SRQs, MRs and the
//! keys they map, AHs, DMA buffers, request ids, rdma_cm event queues and
//! IDs; QPs and queues some with an event sink; send and receive streams,
//! within a step), objects of the other
//! device and of other PDs included, with random sizes, offsets, keys and
//! timeouts, and drops objects in random orders (`pool.rs`; its counts in
//! `stats.rs`). Every call
//! must succeed or return an errno; one that the layer must refuse and
//! accepts is a violation; the kernel's checks (KASAN, lockdep, kmemleak,
//! warnings) catch the rest. It is safe Rust, like any user of the layer.
//!
//! Writing `SEED STEPS [THREADS] [forget] [trace]` to
//! `/sys/kernel/debug/kverbs_exerciser/run` runs STEPS steps in each of
//! THREADS workers (default 1, at most 8; worker `i` is seeded `SEED + i`)
//! over every RDMA device present, then drops what is left; `forget` adds
//! `mem::forget` to the calls (what it leaks, kmemleak reports), `trace`
//! records each step's call. The write returns when every worker is done;
//! reading the file gives the run's counts:
//!
//! ```text
//! seed 1 steps 2000 threads 2 devices 2
//! calls 2811 ok 1630 made 1702 dropped 1690 forgotten 0 violations 0 told 12
//! errno 22 1001
//! ...
//! ```
//!
//! and, if there was one, the first violation (`step N: accepted: what`).
//! One worker's sequence replays with its seed, whatever ran beside it:
//! the calls it makes depend on its seed and on which of them failed.

#![deny(unsafe_code)]

mod pool;
mod rng;
mod stats;

use core::fmt::Write;
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::{c_str, new_mutex, prelude::*, sync::Arc, sync::Mutex, workqueue};
use kverbs::ARef;
use kverbs::{
    client::{Client, Registration},
    debugfs::{Dir, File},
    device::Device,
    Show, Store,
};
use pool::Pool;
use stats::Stats;

module! {
    type: KverbsExerciser,
    name: "kverbs_exerciser",
    description: "kverbs exerciser: a seeded, randomized driver of the safe API",
    license: "GPL",
}

const MAX_THREADS: u64 = 8;
const MAX_STEPS: u64 = 10_000_000;

type Devices = Mutex<KVec<ARef<Device>>>;

/// What the workers of a run share: their counts, and how many still run.
#[pin_data]
struct Shared {
    #[pin]
    stats: Mutex<Stats>,
    running: AtomicU32,
}

/// One worker: `steps` calls seeded `seed`, then everything dropped (the
/// timers that drop themselves waited for).
fn work(devs: &[ARef<Device>], seed: u64, steps: u64, forget: bool, trace: bool) -> Stats {
    let mut pool = Pool::new(devs, seed, forget, trace);
    for _ in 0..steps {
        pool.step();
    }
    pool.clear();
    pool.wait_own_timers();
    core::mem::take(&mut pool.stats)
}

/// `run`: the control file.
struct Runner {
    devices: Arc<Devices>,
    report: Pin<KBox<Mutex<KVec<u8>>>>,
}

struct Args {
    seed: u64,
    steps: u64,
    threads: u64,
    forget: bool,
    trace: bool,
}

fn parse(text: &str) -> Result<Args> {
    let mut words = text.split_whitespace();
    let number = |w: Option<&str>, what: &str, max: u64| -> Result<u64> {
        match w.map(str::parse::<u64>) {
            Some(Ok(n)) if n <= max => Ok(n),
            _ => {
                pr_err!(
                    "exerciser: want 'SEED STEPS [THREADS] [forget] [trace]': bad {}\n",
                    what
                );
                Err(EINVAL)
            }
        }
    };
    let seed = number(words.next(), "SEED", u64::MAX)?;
    let steps = number(words.next(), "STEPS (at most 10000000)", MAX_STEPS)?;
    let mut args = Args {
        seed,
        steps,
        threads: 1,
        forget: false,
        trace: false,
    };
    for w in words {
        match w {
            "forget" => args.forget = true,
            "trace" => args.trace = true,
            _ => {
                args.threads = number(Some(w), "THREADS (1 to 8)", MAX_THREADS)?;
                if args.threads == 0 {
                    pr_err!("exerciser: THREADS must be 1 to 8\n");
                    return Err(EINVAL);
                }
            }
        }
    }
    Ok(args)
}

impl Store for Runner {
    fn store(&self, input: &[u8]) -> Result {
        let text = core::str::from_utf8(input).map_err(|_| EINVAL)?;
        let args = parse(text)?;
        let mut devs = KVec::new();
        for d in self.devices.lock().iter() {
            devs.push(d.clone(), GFP_KERNEL)?;
        }
        if devs.is_empty() {
            pr_err!("exerciser: no RDMA device\n");
            return Err(ENODEV);
        }
        let shared = Arc::pin_init(
            pin_init!(Shared {
                stats <- new_mutex!(Stats::default()),
                running: AtomicU32::new(0),
            }),
            GFP_KERNEL,
        )?;
        // Workers 1.. on the unbound workqueue, worker 0 here.
        for i in 1..args.threads {
            let mut mine = KVec::new();
            for d in devs.iter() {
                mine.push(d.clone(), GFP_KERNEL)?;
            }
            let sh = shared.clone();
            let (seed, steps, forget, trace) = (
                args.seed.wrapping_add(i),
                args.steps,
                args.forget,
                args.trace,
            );
            sh.running.fetch_add(1, Ordering::AcqRel);
            let spawned = workqueue::system_unbound().try_spawn(GFP_KERNEL, move || {
                let st = work(&mine, seed, steps, forget, trace);
                sh.stats.lock().add(&st);
                drop(mine);
                sh.running.fetch_sub(1, Ordering::AcqRel);
            });
            if spawned.is_err() {
                shared.running.fetch_sub(1, Ordering::AcqRel);
                pr_err!("exerciser: cannot start worker {}\n", i);
                break;
            }
        }
        let st = work(&devs, args.seed, args.steps, args.forget, args.trace);
        shared.stats.lock().add(&st);
        // The workers run this module's code: wait for every one, signals
        // or not.
        while shared.running.load(Ordering::Acquire) != 0 {
            kverbs::msleep(10);
        }
        let st = shared.stats.lock();
        let mut rep = KVec::new();
        let mut w = stats::Text(&mut rep);
        let _ = writeln!(
            w,
            "seed {} steps {} threads {} devices {}",
            args.seed,
            args.steps,
            args.threads,
            devs.len()
        );
        let _ = writeln!(
            w,
            "calls {} ok {} made {} dropped {} forgotten {} violations {} told {}",
            st.calls, st.ok, st.made, st.dropped, st.forgotten, st.violations, st.told
        );
        for (n, c) in st.errnos.iter() {
            let _ = writeln!(w, "errno {} {}", n, c);
        }
        let _ = w.write_str(core::str::from_utf8(&st.text).unwrap_or("?\n"));
        drop(st);
        *self.report.lock() = rep;
        Ok(())
    }
}

impl Show for Runner {
    fn show(&self, out: &mut dyn Write) -> Result {
        out.write_str(core::str::from_utf8(&self.report.lock()).unwrap_or("?\n"))?;
        Ok(())
    }
}

/// The RDMA client: it keeps the list of devices.
struct Exerciser {
    devices: Arc<Devices>,
}

kverbs::client_slot!(Exerciser);

impl Client for Exerciser {
    type DeviceData = ();

    fn add(&self, dev: &Device) -> Result {
        self.devices.lock().push(dev.into(), GFP_KERNEL)?;
        Ok(())
    }

    /// Drops `dev` from the list: its unregistration waits for the runs
    /// that hold it.
    fn remove(&self, dev: &Device, _data: ()) {
        let mut list = self.devices.lock();
        let old = core::mem::replace(&mut *list, KVec::new());
        for d in old {
            if !d.same_as(dev) {
                // On allocation failure the exerciser forgets that device.
                let _ = list.push(d, GFP_KERNEL);
            }
        }
    }
}

struct KverbsExerciser {
    // Dropped first: every device leaves the list.
    _reg: Registration<Exerciser>,
    // `kverbs_exerciser/run`; its directory goes with it.
    _run: File<Runner>,
}

impl kernel::Module for KverbsExerciser {
    fn init(module: &'static ThisModule) -> Result<Self> {
        let devices = Arc::pin_init(new_mutex!(KVec::new()), GFP_KERNEL)?;
        let root = Dir::new(c_str!("kverbs_exerciser"), module)?;
        let runner = Runner {
            devices: devices.clone(),
            report: KBox::pin_init(new_mutex!(KVec::new()), GFP_KERNEL)?,
        };
        let run = root.control_file(c_str!("run"), runner)?;
        let reg = Registration::new(c_str!("kverbs_exerciser"), Exerciser { devices })?;
        Ok(KverbsExerciser {
            _reg: reg,
            _run: run,
        })
    }
}
