/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the C modules of make bench (cbench/, limit/) share. bench.sh copies
 * this file beside their directories.
 */
#ifndef KVERBS_BENCH_DEV_H
#define KVERBS_BENCH_DEV_H

#include <linux/netdevice.h>
#include <net/net_namespace.h>
#include <rdma/ib_verbs.h>

/*
 * The RDMA device named `name`, held (ib_device_put() it), or NULL. By way
 * of the netdevs of init_net: 7.x no longer has ib_device_get_by_name(),
 * and ib_device_get_by_netdev() is exported by both kernels. Finds devices
 * that have a netdev (rxe, RoCE), which is what these modules run on.
 */
static inline struct ib_device *kv_bench_get_device(const char *name)
{
	struct ib_device *dev, *found = NULL;
	struct net_device *ndev;

	rcu_read_lock();
	for_each_netdev_rcu(&init_net, ndev) {
		dev = ib_device_get_by_netdev(ndev, RDMA_DRIVER_UNKNOWN);
		if (!dev)
			continue;
		if (!strcmp(dev_name(&dev->dev), name)) {
			found = dev;
			break;
		}
		ib_device_put(dev);
	}
	rcu_read_unlock();
	return found;
}

#endif
