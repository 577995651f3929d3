// SPDX-License-Identifier: GPL-2.0
/*
 * C helpers of the kverbs safe layer: macros that bindgen cannot turn into
 * Rust.  Static inline functions need no helper here: bindgen wraps them in
 * the generated rust/kverbs_extern.c.
 */
#include <linux/sysfs.h>

#include "kverbs_helpers.h"

void kverbs_sysfs_attr_init(struct attribute *attr)
{
	sysfs_attr_init(attr);
}
