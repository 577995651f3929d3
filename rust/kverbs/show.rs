// SPDX-License-Identifier: GPL-2.0

//! Text shown by debugfs and sysfs files.

use core::fmt;
use kernel::prelude::*;

/// Something a debugfs or sysfs file shows as text when it is read.
///
/// The text is produced anew at each read, so it shows the current state.
pub trait Show: Send + Sync {
    /// Writes the file's content to `out`.
    ///
    /// An error is returned to the reader as the result of `read(2)`.
    fn show(&self, out: &mut dyn fmt::Write) -> Result;
}

/// Something that takes the text written to a control file.
pub trait Store: Send + Sync {
    /// Acts on `input`, the bytes of one `write(2)` call (at most
    /// [`crate::debugfs::MAX_WRITE`] bytes; longer writes get `-EINVAL`).
    ///
    /// On success the whole write is consumed; an error is returned to the
    /// writer as the result of `write(2)`.
    fn store(&self, input: &[u8]) -> Result;
}
