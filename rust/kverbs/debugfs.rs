// SPDX-License-Identifier: GPL-2.0

//! debugfs directories and files.
//!
//! C header: [`include/linux/debugfs.h`](srctree/include/linux/debugfs.h)
//!
//! A [`Dir`] is reference counted: every subdirectory and [`File`] holds a
//! reference to its parent, so a directory is removed only after everything
//! in it, and removal never races with a child's own removal.
//!
//! Files are created with the full debugfs proxy: removing a file waits for
//! the readers and writers inside its callbacks, and later calls on a file
//! that is still open fail with `-EIO`.
//!
//! The file operations are those of this crate, owned by the module it is
//! built into, kverbs.ko (`.owner = THIS_MODULE`). What pins that module
//! while a file is open is the proxy: `debugfs_create_file` gives the inode
//! `debugfs_full_proxy_file_operations` (owner-less, built in) and keeps
//! ours as the real ones; `full_proxy_open` takes `fops_get` of them, a
//! reference to kverbs.ko (`-ENXIO` if it is going), before it calls our
//! `open`, and `full_proxy_release` drops it (`fops_put`) after our
//! `release` has returned. While the [`File`] exists its `LayerRef` holds
//! kverbs.ko too. But what a file shows and takes is the data and code of
//! the module that created it, named when its root directory is
//! ([`Dir::new`]): an open file holds a reference to that module too, taken
//! in our `open` and dropped at the end of our `release`, so its `rmmod` is
//! refused ("in use", `-EAGAIN`) until the file is closed. An open while
//! that module is still in its `init` or already going fails with `ENXIO`.
//!
//! A file that outlives its module (`mem::forget`, a reference cycle) is
//! removed when the module goes, or the module its root directory was made
//! for, by kverbs.ko's module notifier ([`crate::owned`]): debugfs then
//! calls no code of it. Its memory and its directory (empty, which calls no
//! code) stay, leaked (see [`crate::owned`] for a handle moved into another
//! module). And a file pins the module its root directory was made for: a
//! [`Dir`]
//! handed to another module, which adds files of its own data and code
//! under it, leaves those files pinning the first module, not their own
//! (keep a module's files under a root of its own).

use crate::bindings;
use crate::layer_ref::LayerRef;
use crate::owned::Owned;
use crate::show::{Show, Store};
use core::{
    fmt, ptr,
    sync::atomic::{AtomicPtr, Ordering},
};
use kernel::{
    error::from_err_ptr,
    ffi::{c_char, c_int, c_void},
    prelude::*,
    str::CStr,
    sync::Arc,
    types::Opaque,
    ThisModule,
};

/// The largest write a control file takes in one `write(2)` call.
pub const MAX_WRITE: usize = 4096;

/// A debugfs directory, removed (with its contents) when the last reference
/// to it is dropped.
#[derive(Clone)]
pub struct Dir(Arc<DirInner>);

/// # Invariants
///
/// `dentry` is a debugfs directory created by `debugfs_create_dir` and not
/// yet removed. `parent`, if any, is the directory it was created in, and
/// `module` is the module of the root directory.
struct DirInner {
    dentry: *mut bindings::dentry,
    module: &'static ThisModule,
    _parent: Option<Dir>,
}

// SAFETY: The dentry pointer is only used to create children and to remove
// the directory, both of which debugfs allows from any thread.
unsafe impl Send for DirInner {}
// SAFETY: `&DirInner` gives no access to anything but the same thread-safe
// debugfs calls.
unsafe impl Sync for DirInner {}

impl Drop for DirInner {
    fn drop(&mut self) {
        // SAFETY: By the type invariant `dentry` is a live debugfs directory;
        // every child holds a reference to this directory, so it is empty.
        unsafe { bindings::debugfs_remove(self.dentry) };
    }
}

impl Dir {
    /// The directory's dentry, live while `self` is.
    pub(crate) fn as_raw(&self) -> *mut bindings::dentry {
        self.0.dentry
    }

    /// Creates a directory `name` at the debugfs root for the files of
    /// `module` (the one given to its `init`): while a file of this tree is
    /// open, `module` cannot be unloaded.
    pub fn new(name: &CStr, module: &'static ThisModule) -> Result<Self> {
        Self::create(name, module, None)
    }

    /// Creates a directory `name` inside this one.
    pub fn subdir(&self, name: &CStr) -> Result<Self> {
        Self::create(name, self.0.module, Some(self))
    }

    fn create(name: &CStr, module: &'static ThisModule, parent: Option<&Dir>) -> Result<Self> {
        let parent_dentry = parent.map_or(ptr::null_mut(), |p| p.0.dentry);
        // SAFETY: `name` is a valid C string; `parent_dentry` is null or a
        // live directory kept alive by `parent`.
        let dentry = from_err_ptr(unsafe {
            bindings::debugfs_create_dir(name.as_char_ptr(), parent_dentry)
        })?;
        // INVARIANT: `dentry` was just created in `parent`.
        let inner = DirInner {
            dentry,
            module,
            _parent: parent.cloned(),
        };
        match Arc::new(inner, GFP_KERNEL) {
            Ok(inner) => Ok(Dir(inner)),
            // Dropping the `DirInner` inside the error removes the dentry.
            Err(_) => Err(ENOMEM),
        }
    }

    /// Creates a read-only (mode 0444) file `name` showing `data`.
    pub fn file<T: Show + 'static>(&self, name: &CStr, data: T) -> Result<File<T>> {
        File::create(self, name, 0o444, data, &FOPS_RO.0, Entry::<T>::VTABLE_RO)
    }

    /// Creates a control file `name` (mode 0600): reading it shows `data`,
    /// writing to it calls [`Store::store`].
    pub fn control_file<T: Show + Store + 'static>(&self, name: &CStr, data: T) -> Result<File<T>> {
        File::create(self, name, 0o600, data, &FOPS_RW.0, Entry::<T>::VTABLE_RW)
    }
}

/// Erased per-type operations of a file, found through `inode->i_private`.
struct VTable {
    show: unsafe fn(*const Header, &mut dyn fmt::Write) -> Result,
    store: Option<unsafe fn(*const Header, &[u8]) -> Result>,
}

/// The start of every [`Entry`], the only part the C callbacks know.
#[repr(C)]
struct Header {
    vtable: &'static VTable,
    /// The module whose data and code the file reaches.
    module: &'static ThisModule,
}

/// What `inode->i_private` points to: the operations, then the data; the
/// file, and its entry on kverbs.ko's list of what calls a module's code.
#[repr(C)]
struct Entry<T> {
    header: Header,
    data: T,
    dentry: AtomicPtr<bindings::dentry>,
    owned: Owned,
}

impl<T: Show> Entry<T> {
    const VTABLE_RO: &'static VTable = &VTable {
        show: Self::show,
        store: None,
    };

    /// # Safety
    ///
    /// `header` must point to the header of a live `Entry<T>`.
    unsafe fn show(header: *const Header, out: &mut dyn fmt::Write) -> Result {
        // SAFETY: `Header` is the first field of the `#[repr(C)]` `Entry<T>`
        // and the caller guarantees that this entry is live.
        let entry = unsafe { &*header.cast::<Entry<T>>() };
        entry.data.show(out)
    }
}

impl<T: Show + Store> Entry<T> {
    const VTABLE_RW: &'static VTable = &VTable {
        show: Self::show,
        store: Some(Self::store),
    };

    /// # Safety
    ///
    /// `header` must point to the header of a live `Entry<T>`.
    unsafe fn store(header: *const Header, input: &[u8]) -> Result {
        // SAFETY: As in `show`.
        let entry = unsafe { &*header.cast::<Entry<T>>() };
        entry.data.store(input)
    }
}

/// A debugfs file showing (and, for a control file, taking) text; removed on
/// drop. The drop waits for the calls of its `show` and `store` in progress
/// (`__debugfs_file_removed`): it must not be made from one of them, which
/// would wait for itself -- nor from an event sink that such a call may
/// reach: an object with a sink dropped in a `store` delivers its last
/// events to the sink there, and waits for the sink's call in progress.
///
/// # Invariants
///
/// `entry.dentry` is a debugfs file in `dir`, created with `entry` as its
/// `i_private` and one of this module's `FOPS_*` tables, and not yet
/// removed (or taken by the module notifier, which removes it).
pub struct File<T> {
    entry: KBox<Entry<T>>,
    _dir: Dir,
    /// Dropped last: the file's operations are kverbs code.
    _layer: LayerRef,
}

// SAFETY: The dentry is only used to remove the file, which any thread may
// do; the data is `Send` as `Show` requires it.
unsafe impl<T: Send> Send for File<T> {}
// SAFETY: `&File<T>` only gives `&T`, and `T: Sync` as `Show` requires it.
unsafe impl<T: Sync> Sync for File<T> {}

impl<T> File<T> {
    fn create(
        dir: &Dir,
        name: &CStr,
        mode: u16,
        data: T,
        fops: &'static bindings::file_operations,
        vtable: &'static VTable,
    ) -> Result<Self> {
        let layer = LayerRef::new()?;
        let entry = KBox::new(
            Entry {
                header: Header {
                    vtable,
                    module: dir.0.module,
                },
                data,
                dentry: AtomicPtr::new(ptr::null_mut()),
                owned: Owned::new(),
            },
            GFP_KERNEL,
        )?;
        // SAFETY: `owned` stays in the box, not moved, until the drop has
        // taken it off the list. The addresses: the vtable's `show` for
        // `T`, compiled into the module that instantiates this function
        // for its `T` (the file's code), and the module the root directory
        // was made for, which `open` pins (its `struct module`).
        unsafe {
            entry.owned.init(
                vtable.show as *const () as usize,
                ptr::from_ref(dir.0.module) as usize,
                None,
                orphan::<T>,
            )
        };
        let private = ptr::from_ref(&entry.header).cast_mut().cast::<c_void>();
        // SAFETY: `name` is a valid C string, `dir.0.dentry` a live
        // directory. `private` stays valid until the file is removed:
        // `File::drop` removes the file before the box is freed.
        let dentry = from_err_ptr(unsafe {
            bindings::kverbs_debugfs_create_file(
                name.as_char_ptr(),
                mode,
                dir.0.dentry,
                private,
                fops,
            )
        })?;
        entry.dentry.store(dentry, Ordering::Release);
        // SAFETY: Once, after `init`.
        unsafe { entry.owned.add() };
        // INVARIANT: the file was created above with `entry` and `fops`.
        Ok(File {
            entry,
            _dir: dir.clone(),
            _layer: layer,
        })
    }

    /// The data this file shows.
    pub fn data(&self) -> &T {
        &self.entry.data
    }
}

impl<T> Drop for File<T> {
    fn drop(&mut self) {
        // SAFETY: `create` initialised the entry before making the file.
        if !unsafe { self.entry.owned.take() } {
            // The notifier of its module's going removed it.
            return;
        }
        // SAFETY: By the type invariant the file exists. `debugfs_remove`
        // returns only once no callback runs on it any more, so `entry` may
        // be freed afterwards (fields are dropped after this function).
        unsafe { bindings::debugfs_remove(self.entry.dentry.load(Ordering::Acquire)) };
    }
}

/// The `orphan` of a file on kverbs.ko's list, whose module is going
/// (after its exit, with a [`File`] it never dropped): removes it, which
/// waits for the calls of its `show` and `store` in progress, so that none
/// comes after the module is gone (an open file fails with `EIO` after).
/// The file's memory stays until it is dropped (if ever).
///
/// # Safety
///
/// Called by kverbs.ko's module notifier, in process context with no lock
/// held, with the entry of the `owned` field of a live `Entry<T>`, which
/// it has taken off the list.
unsafe extern "C" fn orphan<T>(o: *mut bindings::kverbs_owned) {
    // SAFETY: By the caller's guarantee; the `Entry<T>` lives until its
    // `File`'s drop, which waits for `Owned::done`.
    let entry: &Entry<T> = unsafe { Owned::owner(o, core::mem::offset_of!(Entry<T>, owned)) };
    let _mark = crate::event::mark_delivering();
    // SAFETY: The file exists (its `File` has not removed it: the drop does
    // not once the entry is taken), set before the entry was listed.
    unsafe { bindings::debugfs_remove(entry.dentry.load(Ordering::Acquire)) };
    entry.owned.done();
}

/// A file operations table: plain data, never written after compile time.
#[repr(transparent)]
struct Fops(bindings::file_operations);

// SAFETY: The table is immutable; its pointers are to functions and to the
// module itself, which are valid from any thread.
unsafe impl Sync for Fops {}

extern "C" {
    /// The module this crate is built into (defined by modpost), whose
    /// callbacks the tables hold.
    static __this_module: Opaque<bindings::module>;
}

// SAFETY: An all-zero `file_operations` is valid: every member is an
// optional function pointer, a pointer or an integer.
const NO_FOPS: bindings::file_operations = unsafe { core::mem::zeroed() };

static FOPS_RO: Fops = Fops(bindings::file_operations {
    // SAFETY: Only the address of the module is taken, nothing is read.
    owner: unsafe { __this_module.get() },
    open: Some(open_callback),
    read: Some(bindings::seq_read),
    llseek: Some(bindings::seq_lseek),
    release: Some(release_callback),
    ..NO_FOPS
});

static FOPS_RW: Fops = Fops(bindings::file_operations {
    write: Some(write_callback),
    ..FOPS_RO.0
});

/// What the `seq_file` of an open file points to.
///
/// # Invariants
///
/// `header` is the header of the file's entry, live while the file is not
/// removed; this open file holds a reference to `module`.
struct Opened {
    header: *const Header,
    module: *mut kernel::bindings::module,
}

/// `open` of every kverbs debugfs file: a `seq_file` over its [`Entry`],
/// holding a reference to the module of the entry until `release`.
///
/// # Safety
///
/// Called by the VFS through the debugfs proxy with a valid `inode` and
/// `file` of a file created by [`File::create`].
unsafe extern "C" fn open_callback(
    inode: *mut bindings::inode,
    file: *mut bindings::file,
) -> c_int {
    // SAFETY: `inode` is valid (function safety requirement); its
    // `i_private` is the entry header the file was created with, live while
    // the proxy holds the file (until `File::drop`).
    let header = unsafe { (*inode).i_private }.cast::<Header>().cast_const();
    // SAFETY: As above, the header is live.
    let module = unsafe { (*header).module }.as_ptr();
    // SAFETY: `module` is live: the entry is, and the module that named
    // itself in `Dir::new` removes its files (and frees their entries)
    // before it is freed (see the module's documentation for the limit of
    // this). This fails while the module is in its `init` (a failing init
    // frees the module whatever its count) or going; the open then fails
    // as the proxy fails it for a going owner.
    if !unsafe { bindings::kverbs_module_get_live(module.cast()) } {
        return ENXIO.to_errno();
    }
    // INVARIANT: the reference to `module` was taken above;
    // `release_callback` (or a failure below) drops it.
    let opened = match KBox::new(Opened { header, module }, GFP_KERNEL) {
        Ok(opened) => KBox::into_raw(opened),
        Err(_) => {
            // SAFETY: The reference taken above.
            unsafe { bindings::kverbs_module_put(module.cast()) };
            return ENOMEM.to_errno();
        }
    };
    // SAFETY: `file` is valid; the `seq_file` keeps `opened` until
    // `release_callback`.
    let ret = unsafe { bindings::single_open(file, Some(show_callback), opened.cast()) };
    if ret != 0 {
        // SAFETY: Not given to anyone: `single_open` failed.
        drop(unsafe { KBox::from_raw(opened) });
        // SAFETY: The reference taken above.
        unsafe { bindings::kverbs_module_put(module.cast()) };
    }
    ret
}

/// `release` of every kverbs debugfs file: frees what [`open_callback`] made
/// and drops its module reference. Called even after the file was removed:
/// the entry may be gone, and is not touched.
///
/// # Safety
///
/// Called by the debugfs proxy, once, on a file opened by [`open_callback`].
unsafe extern "C" fn release_callback(
    inode: *mut bindings::inode,
    file: *mut bindings::file,
) -> c_int {
    // SAFETY: `single_open` set `private_data` to the `seq_file`, whose
    // `private` is the `Opened` of this open file, given back once, here.
    let opened = unsafe {
        KBox::from_raw(
            (*(*file).private_data.cast::<bindings::seq_file>())
                .private
                .cast::<Opened>(),
        )
    };
    let module = opened.module;
    drop(opened);
    // SAFETY: The file was opened by `single_open`.
    let ret = unsafe { bindings::single_release(inode, file) };
    // SAFETY: By the invariant of `Opened`, this open file held a reference
    // to `module`. Nothing of that module is used after this.
    unsafe { bindings::kverbs_module_put(module.cast()) };
    ret
}

/// `show` of the `seq_file` opened by [`open_callback`].
///
/// # Safety
///
/// Called by `seq_read` on a `seq_file` opened by [`open_callback`].
unsafe extern "C" fn show_callback(m: *mut bindings::seq_file, _v: *mut c_void) -> c_int {
    // SAFETY: `m` is valid; `private` is the `Opened` given to `single_open`,
    // live until `release_callback`.
    let header = unsafe { (*(*m).private.cast::<Opened>()).header };
    let mut out = SeqWriter(m);
    // SAFETY: The debugfs proxy keeps the file (hence the entry) alive for
    // the duration of this read; `header` is an entry's header.
    match unsafe { ((*header).vtable.show)(header, &mut out) } {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// `write` of control files: copies the user's bytes and calls `store`.
///
/// # Safety
///
/// Called by the VFS through the debugfs proxy on a file opened by
/// [`open_callback`], with `buf` a user pointer to `count` bytes.
unsafe extern "C" fn write_callback(
    file: *mut bindings::file,
    buf: *const c_char,
    count: usize,
    _ppos: *mut bindings::loff_t,
) -> isize {
    if count > MAX_WRITE {
        pr_warn!(
            "debugfs: write of {} bytes refused, at most {} are taken\n",
            count,
            MAX_WRITE
        );
        return EINVAL.to_errno() as isize;
    }
    let mut input = KVec::new();
    if let Err(e) = crate::compat::user_slice(buf, count).read_all(&mut input, GFP_KERNEL) {
        return e.to_errno() as isize;
    }
    // SAFETY: `single_open` set `private_data` to the `seq_file`, whose
    // `private` is the `Opened` of this open file; the proxy keeps the
    // entry its header belongs to alive.
    let header = unsafe {
        (*(*(*file).private_data.cast::<bindings::seq_file>())
            .private
            .cast::<Opened>())
        .header
    };
    // SAFETY: As above, `header` is a live entry's header.
    let store = match unsafe { (*header).vtable.store } {
        Some(store) => store,
        None => return EPERM.to_errno() as isize,
    };
    // SAFETY: `header` belongs to an `Entry<T>` whose vtable has this `store`.
    match unsafe { store(header, &input) } {
        Ok(()) => count as isize,
        Err(e) => e.to_errno() as isize,
    }
}

/// Writes text into a `seq_file`.
///
/// # Invariants
///
/// The pointer is a `seq_file` inside its `show` callback.
struct SeqWriter(*mut bindings::seq_file);

impl fmt::Write for SeqWriter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        // SAFETY: By the type invariant the `seq_file` is valid; `s` is
        // valid for `s.len()` bytes. An overflow is recorded in the
        // `seq_file`, which then calls `show` again with a larger buffer.
        unsafe { bindings::seq_write(self.0, s.as_ptr().cast(), s.len()) };
        Ok(())
    }
}
