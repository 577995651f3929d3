/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The headers bindgen reads: the C declarations the kverbs safe layer binds
 * to.  bindgen reads this file with the kernel's own C flags (see Kbuild) and
 * writes
 * rust/bindings_generated.rs plus rust/kverbs_extern.c, the C wrappers that
 * make the static inline verbs callable from Rust.
 */
#include <linux/blk-mq.h>
#include <linux/debugfs.h>
#include <linux/fs.h>
#include <linux/kobject.h>
#include <linux/seq_file.h>
#include <linux/sysfs.h>
#include <rdma/ib_verbs.h>
#include <rdma/ib_cache.h>
#include <rdma/rdma_cm.h>
#include <linux/scatterlist.h>
#include <linux/wait.h>

#include "kverbs_helpers.h"
