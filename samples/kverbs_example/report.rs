// SPDX-License-Identifier: GPL-2.0

//! The report of a run: the text a control file shows until the next run.

use core::fmt::{self, Write};
use kernel::prelude::*;

/// The report of a run, kept for readers of `rc`.
pub(crate) struct Report(KVec<u8>, bool);

impl Report {
    pub(crate) fn new() -> Self {
        Report(KVec::new(), false)
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The text, for keeping.
    pub(crate) fn into_vec(self) -> KVec<u8> {
        self.0
    }

    /// Whether a write found no memory: the text lacks something.
    pub(crate) fn lost(&self) -> bool {
        self.1
    }

    /// Makes room for `n` more bytes; false, and the text marked as
    /// lacking, if there is no memory.
    pub(crate) fn reserve(&mut self, n: usize) -> bool {
        let ok = self.0.reserve(n, GFP_KERNEL).is_ok();
        self.1 |= !ok;
        ok
    }
}

impl Write for Report {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0
            .extend_from_slice(s.as_bytes(), GFP_KERNEL)
            .map_err(|_| {
                self.1 = true;
                fmt::Error
            })
    }
}
