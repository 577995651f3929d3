// SPDX-License-Identifier: GPL-2.0

//! Cases of DMA buffers: CPU copies that exclude each other, buffers of
//! several chunks.

use crate::common::{buf, caps, ok, pd_cq, port, refused, ud_rts, Env, Outcome, Text, QKEY};
use core::{
    fmt::Write,
    sync::atomic::{AtomicBool, AtomicU32, Ordering},
};
use kernel::{prelude::*, sync::Arc, workqueue};
use kverbs::{
    dma::{DmaBuf, CHUNK},
    mr::Mr,
    qp::{Qp, QpCaps},
};

/// What the writers of `dma_buf_copies_exclude_each_other` share with it.
struct Race {
    buf: Arc<DmaBuf>,
    stop: AtomicBool,
    running: AtomicU32,
    busy: AtomicU32,
}

/// CPU copies of one `DmaBuf` from several threads never overlap: two
/// writers (on the unbound workqueue) write whole-buffer patterns while
/// this thread reads it for a second. A read never sees two patterns mixed
/// (a torn copy), and copies do meet one in progress (`EBUSY`) -- without
/// the exclusion, none ever would.
pub(crate) fn dma_buf_copies_exclude_each_other(env: &Env, out: &mut Text) -> Outcome {
    const LEN: usize = 4096;
    let race = ok(
        Arc::new(
            Race {
                buf: ok(buf(&env.a), "buffer", out)?,
                stop: AtomicBool::new(false),
                running: AtomicU32::new(0),
                busy: AtomicU32::new(0),
            },
            GFP_KERNEL,
        )
        .map_err(Into::into),
        "race",
        out,
    )?;
    for pattern in [0xaa_u8, 0x55] {
        let r = race.clone();
        let data = ok(
            KVec::from_elem(pattern, LEN, GFP_KERNEL).map_err(Into::into),
            "data",
            out,
        )?;
        r.running.fetch_add(1, Ordering::AcqRel);
        let spawned = workqueue::system_unbound().try_spawn(GFP_KERNEL, move || {
            while !r.stop.load(Ordering::Acquire) {
                if r.buf.write(0, &data).is_err() {
                    r.busy.fetch_add(1, Ordering::Relaxed);
                }
            }
            r.running.fetch_sub(1, Ordering::AcqRel);
        });
        if spawned.is_err() {
            race.running.fetch_sub(1, Ordering::AcqRel);
            race.stop.store(true, Ordering::Release);
            return Err("cannot spawn a writer");
        }
    }
    let mut seen = ok(
        KVec::from_elem(0u8, LEN, GFP_KERNEL).map_err(Into::into),
        "out",
        out,
    )?;
    let (mut reads, mut busy, mut torn) = (0u32, 0u32, 0u32);
    let start = kverbs::now_ns();
    while kverbs::now_ns() - start < 1_000_000_000 {
        match race.buf.read(0, &mut seen) {
            Ok(()) => {
                reads += 1;
                if seen.iter().any(|&b| b != seen[0]) {
                    torn += 1;
                }
            }
            Err(_) => busy += 1,
        }
    }
    race.stop.store(true, Ordering::Release);
    let start = kverbs::now_ns();
    while race.running.load(Ordering::Acquire) != 0 && kverbs::now_ns() - start < 5_000_000_000 {
        kverbs::msleep(10);
    }
    let writers_busy = race.busy.load(Ordering::Relaxed);
    let _ = write!(
        out,
        "{} reads, {} torn, EBUSY {} times to the reader, {} to the writers",
        reads, torn, busy, writers_busy
    );
    if race.running.load(Ordering::Acquire) != 0 {
        return Err("the writers did not stop");
    }
    if torn != 0 {
        return Err("a read saw two writes mixed");
    }
    if busy + writers_busy == 0 {
        return Err("no copy ever met another");
    }
    Ok(())
}

/// A buffer larger than a chunk: copies cross its chunk boundaries intact,
/// a range takes one SGE per chunk it touches (an empty one none: a
/// zero-length scatter entry means 2 GiB to mlx5), and a QP refuses a request
/// that needs more SGEs than it was created with (`EINVAL`) but takes it
/// when created with enough. An MR maps it whole.
pub(crate) fn chunked_buffer_takes_an_sge_per_chunk(env: &Env, out: &mut Text) -> Outcome {
    let dev = &env.a;
    let len = 2 * CHUNK + 100;
    let big = ok(DmaBuf::new(dev, len), "buffer of 2 chunks + 100 bytes", out)?;
    let big = ok(Arc::new(big, GFP_KERNEL).map_err(Into::into), "Arc", out)?;
    let counts = [
        big.sge_count(0, len),
        big.sge_count(CHUNK - 8, 16),
        big.sge_count(5, 10),
        big.sge_count(2 * CHUNK, 100),
        big.sge_count(len, 1),
        big.sge_count(5, 0),
    ];
    let _ = write!(out, "SGEs {:?}; ", counts);
    if counts != [3, 2, 1, 1, 0, 0] {
        return Err("wrong SGE counts");
    }
    let pattern: [u8; 16] = core::array::from_fn(|i| 0xa0 + i as u8);
    ok(
        big.write(CHUNK - 8, &pattern),
        "write across a boundary",
        out,
    )?;
    let mut back = [0u8; 24];
    ok(
        big.read(CHUNK - 12, &mut back),
        "read across a boundary",
        out,
    )?;
    if back[..4] != [0; 4] || back[4..20] != pattern || back[20..] != [0; 4] {
        let _ = write!(out, "read back {:?}", back);
        return Err("the copy across a boundary is wrong");
    }
    refused(
        DmaBuf::new(dev, kverbs::dma::MAX_LEN + 1),
        EINVAL,
        "buffer over MAX_LEN",
        out,
    )?;
    let (pd, cq) = pd_cq(dev, out)?;
    let one = ok(ud_rts(&pd, &cq), "UD QP of one SGE", out)?;
    refused(
        one.post_recv(&big, CHUNK - 8, 16),
        EINVAL,
        "a receive on 2 chunks, QP of 1 SGE",
        out,
    )?;
    let two = QpCaps {
        max_sge: 2,
        ..caps(2)
    };
    let qp = ok(
        Qp::new_ud(&pd, port(dev), &cq, &cq, two).and_then(|q| q.to_init_ud(0, QKEY)),
        "UD QP of 2 SGEs",
        out,
    )?;
    ok(
        qp.post_recv(&big, CHUNK - 8, 16),
        "a receive on 2 chunks, QP of 2 SGEs",
        out,
    )?;
    let mr = ok(Mr::new(&pd, len), "MR", out)?;
    let remote = ok(mr.map(&big), "MR map of 3 chunks", out)?;
    let _ = write!(out, "MR of {} bytes", remote.len);
    if remote.len as usize != len {
        return Err("the MR does not map the whole buffer");
    }
    Ok(())
}
