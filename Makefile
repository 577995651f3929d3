# SPDX-License-Identifier: GPL-2.0
#
# kverbs: Linux kernel RDMA verbs in safe Rust.
#
#   make            build the modules against the kverbs test kernel
#                   (built and cached on first use; see tools/build-kernel.sh)
#   make KDIR=DIR   build the modules against your own Rust-enabled kernel
#   make kernel-perf  build the performance kernel (no debug options)
#   make run        boot the test kernel in QEMU, create soft-RoCE devices,
#                   load the example module and show what it finds
#   make check      run the kselftests in QEMU (KTAP, then "N passed, N failed");
#                   builds tools/ulp_template first (make ulp);
#                   KVERBS_TESTS="a.sh b.sh": those programs only,
#                   KVERBS_CASES=REGEX: the cases matching it only
#   make ulp        build the out-of-tree ULP template (tools/ulp_template)
#                   against this tree, the documented way
#   make check-harness  the test harness's own tests (tools/testing/kverbs_harness.sh)
#   make bench [QUICK=1]  kverbs vs perftest vs the same loop in C, on the
#                   performance kernel (tools/bench/bench.sh)
#   make bench-nvme [ROUNDS=N]  fio on kverbs_nvme vs the kernel's C host
#                   (nvme-rdma), one nvmet-rdma target, the performance
#                   kernel (tools/bench/guest-nvme.sh)
#   make stress [SEED=N] [ONLY=REGEX] [EXERCISER_MINUTES=M]  the hardening
#                   tests in full (kverbs_hardening.sh: every fault-injection
#                   point, 10,000 fuzzed strings per control file, 50 removal
#                   loops) and their summary, and the exerciser over further
#                   seeds for M minutes (30; kverbs_exerciser.sh), beside
#                   them, and kverbs_nvme.sh with every allocation-failure
#                   point of a connect; ONLY: the hardening cases matching
#                   REGEX, the others skipped
#   make check KVERBS_COLD=1  (or run, check-harness) from an empty cache in a
#                   new temporary directory: the path of a fresh machine
#   make rustfmt / rustfmtcheck / clippy / clean
#
# Kbuild (the file `Kbuild`) says what the modules are made of.

TOP := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
export PATH := $(HOME)/.cargo/bin:$(PATH)

# KVERBS_FLAVOR=perf: the modules, run and check use the performance
# kernel (no KASAN, lockdep, kmemleak: the tests that need them fail).
export KVERBS_FLAVOR

# KVERBS_COLD=1: everything the build caches goes to a new, empty
# directory (the kernel is unpacked, configured and built anew there).
ifeq ($(KVERBS_COLD),1)
export XDG_CACHE_HOME := $(shell mktemp -d /var/tmp/kverbs-cold.XXXXXX)
$(info kverbs: cold run, cache in $(XDG_CACHE_HOME) (remove it when done))
endif

# The toolchain of the test kernel; with your own KDIR pass your own
# (LLVM=1, RUSTC=...) on the command line: it reaches the kernel's make.
TEST_KERNEL_VARS := LLVM=-19 RUSTC=/usr/bin/rustc RUSTFMT=/usr/bin/rustfmt \
	CLIPPY_DRIVER=/usr/bin/clippy-driver BINDGEN=bindgen

ifeq ($(KDIR),)
kdir = $$($(TOP)/tools/build-kernel.sh)
kvars = $(TEST_KERNEL_VARS)
setup = $(TOP)/tools/setup.sh &&
else
kdir = $(KDIR)
kvars =
setup =
endif

# CLIPPY=1 from the environment too (Kbuild takes it only from a command
# line): the modules are then built with clippy's lints, as by make clippy.
# .ci/run builds them so once, for its clippy check and for its tests
# alike: Kbuild rebuilds an object whose command changed, so a build
# without CLIPPY=1 after one with it builds everything again.
kclippy = $(if $(CLIPPY),CLIPPY=$(CLIPPY))

RUST_SOURCES = $(shell find $(TOP)/rust $(TOP)/samples $(TOP)/tools/ulp_template -name '*.rs' ! -name '*_generated.rs')

.PHONY: all modules ulp setup kernel kernel-perf run check check-harness bench bench-nvme stress rustfmt rustfmtcheck clippy clean

all: modules

setup:
	@$(TOP)/tools/setup.sh

kernel: setup
	@$(TOP)/tools/build-kernel.sh >/dev/null

# The performance kernel: no debug options (tools/bench/config).
kernel-perf: setup
	@KVERBS_FLAVOR=perf $(TOP)/tools/build-kernel.sh >/dev/null

modules:
	@$(setup) kdir=$(kdir) && $(MAKE) -C "$$kdir" M=$(TOP) $(kvars) $(kclippy) modules

# The out-of-tree ULP template (tools/ulp_template), built by its own
# Makefile against this tree's kverbs.ko, as a module of one's own would be.
# make check puts it in the guest (kverbs_ulp.sh); a failed build fails it.
ulp_build = $(MAKE) -C $(TOP)/tools/ulp_template KVERBS=$(TOP) KDIR="$$kdir" $(kvars) $(kclippy)
ulp_failed = { echo "kverbs: building the out-of-tree ULP (tools/ulp_template) against this tree failed"; exit 1; }

ulp: modules
	@$(setup) kdir=$(kdir) && $(ulp_build) modules || $(ulp_failed)

clippy:
	@$(setup) kdir=$(kdir) && $(MAKE) -C "$$kdir" M=$(TOP) $(kvars) CLIPPY=1 modules && \
		$(ulp_build) CLIPPY=1 modules

run: modules
	@$(TOP)/tools/vm/run.sh demo

check: modules ulp
	@$(TOP)/tools/vm/run.sh check

# SEED: the fuzzer's, the removal loops' and the exerciser's first seed
# (default: the date); EXERCISER_MINUTES: the exerciser's budget (30).
stress: modules
	@KVERBS_STRESS=$(if $(SEED),$(SEED),$$(date +%Y%m%d)) KVERBS_STRESS_ONLY='$(ONLY)' \
		KVERBS_EXERCISER_SECONDS=$$(( $(if $(EXERCISER_MINUTES),$(EXERCISER_MINUTES),30) * 60 )) \
		KVERBS_TESTS="kverbs_hardening.sh kverbs_exerciser.sh kverbs_nvme.sh" KVERBS_TWO_HOSTS=0 \
		KVERBS_VM_TIMEOUT=15000 $(TOP)/tools/vm/run.sh check

bench: setup
	@QUICK=$(QUICK) $(TOP)/tools/bench/bench.sh

bench-nvme: setup
	@NVME=1 TESTS=" " QPS_LIST=" " AB=none TWO_HOSTS=0 $(TOP)/tools/bench/bench.sh

check-harness: modules
	@$(TOP)/tools/testing/kverbs_harness.sh

rustfmt:
	@/usr/bin/rustfmt --config-path $(TOP)/.rustfmt.toml $(RUST_SOURCES)

rustfmtcheck:
	@/usr/bin/rustfmt --check --config-path $(TOP)/.rustfmt.toml $(RUST_SOURCES)

clean:
	@kdir=$(kdir) && $(MAKE) -C "$$kdir" M=$(TOP) $(kvars) clean && $(ulp_build) clean
