/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Helpers for what bindgen cannot wrap: macros.  Implemented in
 * kverbs_helpers.c and linked into every module that uses kverbs.
 */
#ifndef KVERBS_HELPERS_H
#define KVERBS_HELPERS_H

struct attribute;

/* sysfs_attr_init(): gives a dynamically allocated attribute a lockdep key. */
void kverbs_sysfs_attr_init(struct attribute *attr);

#endif
