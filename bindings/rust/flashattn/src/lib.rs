//! Safe Rust interface to libflashattn: FlashAttention forward, backward, split-KV decode and the merge of partial
//! states behind the library's C ABI (`flashattn-sys` holds the raw declarations).
//!
//! - [`Handle`] owns a library handle (and, for the HOST backend, the workspace its operations need);
//!   [`TensorDescriptor`], [`AttentionDescriptor`] and [`SeqDescriptor`] own their descriptors. Each is destroyed by
//!   `Drop`. Descriptors are independent of handles: operations borrow them for the duration of the call.
//! - Every fallible call returns [`Result`]; an [`Error`] carries the library's [`Status`] and the message it gave
//!   (which names the argument and the values), or, for what this crate refuses before calling the library, the
//!   status `BadParam` and a message naming the argument.
//! - HOST operations take slices: `&[f32]`/`&mut [f32]` for FP32 tensors, `&[u16]`/`&mut [u16]` holding the raw
//!   bits of FP16 or BF16 tensors. Each slice is checked against its descriptor's span (and its element type against
//!   the descriptor's data type) before the library is called, so a short slice is never read or written past.
//! - CUDA operations take raw device pointers and are `unsafe fn`s: nothing here can check device memory.
//! - Attention sinks are set on the [`AttentionDescriptor`] (copied, like ALiBi slopes) and read by forward,
//!   decode and backward; [`Handle::backward_with_sinks_gradient`] also writes their gradient into a slice.
//!
//! Semantics (layouts, masks, LSE, workspace) are those of the C header and docs/semantics.md.

use flashattn_sys as sys;
use std::ffi::CStr;
use std::fmt;
use std::marker::PhantomData;
use std::os::raw::{c_char, c_void};
use std::ptr;

// -----------------------------------------------------------------------------------------------------------------
// Status and errors

/// The library's status codes. `Unknown` keeps a value a newer library may return that this crate does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    Success,
    NotInitialized,
    BadParam,
    NotSupported,
    InsufficientWorkspace,
    AllocFailed,
    ArchMismatch,
    NoDevice,
    ExecutionFailed,
    InternalError,
    Unknown(i32),
}

impl Status {
    pub fn from_raw(raw: sys::flashAttnStatus_t) -> Status {
        match raw {
            sys::FLASHATTN_STATUS_SUCCESS => Status::Success,
            sys::FLASHATTN_STATUS_NOT_INITIALIZED => Status::NotInitialized,
            sys::FLASHATTN_STATUS_BAD_PARAM => Status::BadParam,
            sys::FLASHATTN_STATUS_NOT_SUPPORTED => Status::NotSupported,
            sys::FLASHATTN_STATUS_INSUFFICIENT_WORKSPACE => Status::InsufficientWorkspace,
            sys::FLASHATTN_STATUS_ALLOC_FAILED => Status::AllocFailed,
            sys::FLASHATTN_STATUS_ARCH_MISMATCH => Status::ArchMismatch,
            sys::FLASHATTN_STATUS_NO_DEVICE => Status::NoDevice,
            sys::FLASHATTN_STATUS_EXECUTION_FAILED => Status::ExecutionFailed,
            sys::FLASHATTN_STATUS_INTERNAL_ERROR => Status::InternalError,
            other => Status::Unknown(other),
        }
    }

    pub fn to_raw(self) -> sys::flashAttnStatus_t {
        match self {
            Status::Success => sys::FLASHATTN_STATUS_SUCCESS,
            Status::NotInitialized => sys::FLASHATTN_STATUS_NOT_INITIALIZED,
            Status::BadParam => sys::FLASHATTN_STATUS_BAD_PARAM,
            Status::NotSupported => sys::FLASHATTN_STATUS_NOT_SUPPORTED,
            Status::InsufficientWorkspace => sys::FLASHATTN_STATUS_INSUFFICIENT_WORKSPACE,
            Status::AllocFailed => sys::FLASHATTN_STATUS_ALLOC_FAILED,
            Status::ArchMismatch => sys::FLASHATTN_STATUS_ARCH_MISMATCH,
            Status::NoDevice => sys::FLASHATTN_STATUS_NO_DEVICE,
            Status::ExecutionFailed => sys::FLASHATTN_STATUS_EXECUTION_FAILED,
            Status::InternalError => sys::FLASHATTN_STATUS_INTERNAL_ERROR,
            Status::Unknown(raw) => raw,
        }
    }

    /// The library's name for the status ("FLASHATTN_STATUS_BAD_PARAM").
    pub fn name(self) -> &'static str {
        // The library returns a static string for every value, known or not.
        unsafe { CStr::from_ptr(sys::flashAttnGetErrorString(self.to_raw())) }.to_str().unwrap_or("FLASHATTN_STATUS_?")
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A failed call: the status and the message naming what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    status: Status,
    message: String,
    from_library: bool,
}

impl Error {
    pub fn status(&self) -> Status {
        self.status
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// True when the library returned the error, false when this crate refused the call before making it.
    pub fn from_library(&self) -> bool {
        self.from_library
    }

    fn refused(message: String) -> Error {
        Error { status: Status::BadParam, message, from_library: false }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status, self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// The calling thread's last library error message.
fn last_error_message() -> String {
    unsafe {
        let len = sys::flashAttnGetLastErrorMessage(ptr::null_mut(), 0);
        let mut buf = vec![0u8; len + 1];
        sys::flashAttnGetLastErrorMessage(buf.as_mut_ptr() as *mut c_char, buf.len());
        buf.truncate(len);
        String::from_utf8_lossy(&buf).into_owned()
    }
}

/// Turns a status into a Result; the message is read at once, before anything else can replace it.
fn check(raw: sys::flashAttnStatus_t) -> Result<()> {
    if raw == sys::FLASHATTN_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(Error { status: Status::from_raw(raw), message: last_error_message(), from_library: true })
    }
}

/// Version of the loaded library, MAJOR*10000 + MINOR*100 + PATCH.
pub fn version() -> i32 {
    unsafe { sys::flashAttnGetVersion() }
}

// -----------------------------------------------------------------------------------------------------------------
// Enumerations

macro_rules! raw_enum {
    ($(#[$doc:meta])* $name:ident : $raw:ty { $($variant:ident = $value:path),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub fn to_raw(self) -> $raw {
                match self { $($name::$variant => $value),+ }
            }

            /// None for a value this crate does not know.
            pub fn from_raw(raw: $raw) -> Option<$name> {
                $(if raw == $value { return Some($name::$variant); })+
                None
            }
        }
    };
}

raw_enum!(
    /// Where a handle runs its operations.
    Backend: sys::flashAttnBackend_t {
        Auto = sys::FLASHATTN_BACKEND_AUTO,
        Cuda = sys::FLASHATTN_BACKEND_CUDA,
        Host = sys::FLASHATTN_BACKEND_HOST,
    }
);

raw_enum!(
    /// Storage type of a tensor.
    DataType: sys::flashAttnDataType_t {
        Fp16 = sys::FLASHATTN_DATA_FP16,
        Bf16 = sys::FLASHATTN_DATA_BF16,
        Fp32 = sys::FLASHATTN_DATA_FP32,
    }
);

raw_enum!(
    /// Causal mask mode.
    Mask: sys::flashAttnMaskMode_t {
        None = sys::FLASHATTN_MASK_NONE,
        CausalTopLeft = sys::FLASHATTN_MASK_CAUSAL_TOP_LEFT,
        CausalBottomRight = sys::FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT,
    }
);

raw_enum!(
    /// Operation named in [`Handle::check_support`].
    Operation: sys::flashAttnOperation_t {
        Forward = sys::FLASHATTN_OP_FORWARD,
        Backward = sys::FLASHATTN_OP_BACKWARD,
        DecodeChunk = sys::FLASHATTN_OP_DECODE_CHUNK,
        MergeStates = sys::FLASHATTN_OP_MERGE_STATES,
    }
);

/// Element types of host slices. FP16 and BF16 data are passed as their raw bits in `u16`.
pub trait Element: sealed::Sealed + Copy {
    /// Whether a tensor of this data type is stored in elements of this Rust type.
    fn stores(data_type: DataType) -> bool;
    /// The Rust type's name, for messages.
    const NAME: &'static str;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for u16 {}
}

impl Element for f32 {
    fn stores(data_type: DataType) -> bool {
        data_type == DataType::Fp32
    }
    const NAME: &'static str = "f32";
}

impl Element for u16 {
    fn stores(data_type: DataType) -> bool {
        data_type == DataType::Fp16 || data_type == DataType::Bf16
    }
    const NAME: &'static str = "u16 (FP16/BF16 bits)";
}

// -----------------------------------------------------------------------------------------------------------------
// Tensor descriptor

/// Data type, dimensions and strides (in elements) of one tensor. Immutable once made, so it may be shared between
/// threads and used by several operations at once.
pub struct TensorDescriptor {
    raw: sys::flashAttnTensorDescriptor_t,
    data_type: DataType,
    dims: Vec<i64>,
    strides: Vec<i64>,
}

// The C descriptor is a plain value that the library only reads once set (header: "Descriptors are plain values").
unsafe impl Send for TensorDescriptor {}
unsafe impl Sync for TensorDescriptor {}

impl TensorDescriptor {
    /// A descriptor with explicit strides. The library validates everything (rank 1..8, dims >= 1, strides >= 0,
    /// the last stride 1) and its message says what is wrong.
    pub fn new(data_type: DataType, dims: &[i64], strides: &[i64]) -> Result<TensorDescriptor> {
        if dims.len() != strides.len() {
            return Err(Error::refused(format!(
                "strides: {} strides for {} dimensions",
                strides.len(),
                dims.len()
            )));
        }
        let rank = i32::try_from(dims.len()).map_err(|_| Error::refused(format!("dims: rank {}", dims.len())))?;
        let mut raw = ptr::null_mut();
        check(unsafe { sys::flashAttnCreateTensorDescriptor(&mut raw) })?;
        // Owned from here on, so that a failed set below still destroys it.
        let desc = TensorDescriptor { raw, data_type, dims: dims.to_vec(), strides: strides.to_vec() };
        check(unsafe {
            sys::flashAttnSetTensorDescriptor(raw, data_type.to_raw(), rank, dims.as_ptr(), strides.as_ptr())
        })?;
        Ok(desc)
    }

    /// A descriptor of a densely packed tensor, last dimension fastest (row-major).
    pub fn contiguous(data_type: DataType, dims: &[i64]) -> Result<TensorDescriptor> {
        let mut strides = vec![1i64; dims.len()];
        for i in (0..dims.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1].checked_mul(dims[i + 1]).ok_or_else(|| {
                Error::refused(format!("dims: {:?} has more elements than an i64 counts", dims))
            })?;
        }
        TensorDescriptor::new(data_type, dims, &strides)
    }

    pub fn data_type(&self) -> DataType {
        self.data_type
    }

    pub fn dims(&self) -> &[i64] {
        &self.dims
    }

    pub fn strides(&self) -> &[i64] {
        &self.strides
    }

    /// Reads the descriptor back from the library: (data type, dims, strides).
    pub fn query(&self) -> Result<(DataType, Vec<i64>, Vec<i64>)> {
        let max = sys::FLASHATTN_MAX_TENSOR_RANK;
        let mut dt = 0;
        let mut rank = 0;
        let mut dims = vec![0i64; max as usize];
        let mut strides = vec![0i64; max as usize];
        check(unsafe {
            sys::flashAttnGetTensorDescriptor(self.raw, max, &mut dt, &mut rank, dims.as_mut_ptr(), strides.as_mut_ptr())
        })?;
        let rank = rank.clamp(0, max) as usize;
        dims.truncate(rank);
        strides.truncate(rank);
        let dt = DataType::from_raw(dt)
            .ok_or_else(|| Error::refused(format!("the library reports an unknown data type {}", dt)))?;
        Ok((dt, dims, strides))
    }

    /// Elements from the first to one past the last element the descriptor addresses: 1 + sum (dim - 1) * stride.
    pub fn span(&self) -> Result<usize> {
        let mut last: i128 = 0;
        for (&d, &s) in self.dims.iter().zip(&self.strides) {
            last += (i128::from(d) - 1) * i128::from(s);
        }
        usize::try_from(last + 1).map_err(|_| Error::refused(format!("the tensor spans {} elements", last + 1)))
    }
}

impl Drop for TensorDescriptor {
    fn drop(&mut self) {
        unsafe { sys::flashAttnDestroyTensorDescriptor(self.raw) };
    }
}

impl fmt::Debug for TensorDescriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TensorDescriptor({:?}, dims {:?}, strides {:?})", self.data_type, self.dims, self.strides)
    }
}

// -----------------------------------------------------------------------------------------------------------------
// Attention descriptor

enum Slopes {
    None,
    /// Owned here because the library keeps the pointer and reads it when an operation runs.
    Host { slopes: Box<[f32]>, per_batch: bool },
    Device,
}

enum Sinks {
    None,
    /// Owned here for the same reason as the slopes.
    Host(Box<[f32]>),
    Device,
}

/// Scale, mask, window, softcap, ALiBi, attention sinks and determinism. Defaults: scale 1/sqrt(headDim), no mask,
/// no window, no softcap, no ALiBi, no sinks, non-deterministic backward.
pub struct AttentionDescriptor {
    raw: sys::flashAttnAttentionDescriptor_t,
    slopes: Slopes,
    sinks: Sinks,
    /// A device dSinks pointer is set: HOST backwards refuse the descriptor (they would write to it on the host).
    sinks_gradient_device: bool,
}

unsafe impl Send for AttentionDescriptor {}
unsafe impl Sync for AttentionDescriptor {}

impl AttentionDescriptor {
    pub fn new() -> Result<AttentionDescriptor> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::flashAttnCreateAttentionDescriptor(&mut raw) })?;
        Ok(AttentionDescriptor { raw, slopes: Slopes::None, sinks: Sinks::None, sinks_gradient_device: false })
    }

    /// Softmax scale; 0 returns to the default 1/sqrt(headDim).
    pub fn set_scale(&mut self, scale: f32) -> Result<()> {
        check(unsafe { sys::flashAttnSetAttentionScale(self.raw, scale) })
    }

    /// The scale, 0 while the default applies.
    pub fn scale(&self) -> Result<f32> {
        let mut v = 0.0f32;
        check(unsafe { sys::flashAttnGetAttentionScale(self.raw, &mut v) })?;
        Ok(v)
    }

    pub fn set_mask(&mut self, mask: Mask) -> Result<()> {
        check(unsafe { sys::flashAttnSetAttentionMask(self.raw, mask.to_raw()) })
    }

    pub fn mask(&self) -> Result<Mask> {
        let mut v = 0;
        check(unsafe { sys::flashAttnGetAttentionMask(self.raw, &mut v) })?;
        Mask::from_raw(v).ok_or_else(|| Error::refused(format!("the library reports an unknown mask {}", v)))
    }

    /// Sliding window (left, right) around the bottom-right aligned diagonal; -1 is unbounded.
    pub fn set_window(&mut self, left: i64, right: i64) -> Result<()> {
        check(unsafe { sys::flashAttnSetAttentionWindow(self.raw, left, right) })
    }

    pub fn window(&self) -> Result<(i64, i64)> {
        let (mut l, mut r) = (0i64, 0i64);
        check(unsafe { sys::flashAttnGetAttentionWindow(self.raw, &mut l, &mut r) })?;
        Ok((l, r))
    }

    /// Logit soft-capping; 0 turns it off.
    pub fn set_softcap(&mut self, softcap: f32) -> Result<()> {
        check(unsafe { sys::flashAttnSetAttentionSoftcap(self.raw, softcap) })
    }

    pub fn softcap(&self) -> Result<f32> {
        let mut v = 0.0f32;
        check(unsafe { sys::flashAttnGetAttentionSoftcap(self.raw, &mut v) })?;
        Ok(v)
    }

    pub fn set_deterministic(&mut self, deterministic: bool) -> Result<()> {
        check(unsafe { sys::flashAttnSetAttentionDeterministic(self.raw, deterministic as i32) })
    }

    pub fn deterministic(&self) -> Result<bool> {
        let mut v = 0i32;
        check(unsafe { sys::flashAttnGetAttentionDeterministic(self.raw, &mut v) })?;
        Ok(v != 0)
    }

    /// ALiBi slopes for HOST operations, copied into the descriptor: `[heads]`, or `[batch, heads]` with
    /// `per_batch`. Operations check the count against their tensors before calling the library.
    pub fn set_alibi_slopes(&mut self, slopes: &[f32], per_batch: bool) -> Result<()> {
        let owned: Box<[f32]> = slopes.into();
        check(unsafe { sys::flashAttnSetAttentionAlibiSlopes(self.raw, owned.as_ptr(), per_batch as i32) })?;
        // Replaced only now: the library keeps pointing at the old slopes when the call fails.
        self.slopes = Slopes::Host { slopes: owned, per_batch };
        Ok(())
    }

    /// ALiBi slopes in device memory for CUDA operations.
    ///
    /// # Safety
    /// `slopes` must point to `heads` (or `batch * heads` with `per_batch`) floats in the memory of the handles
    /// this descriptor is used with, and stay valid while any operation using the descriptor may run.
    pub unsafe fn set_alibi_slopes_device(&mut self, slopes: *const f32, per_batch: bool) -> Result<()> {
        check(sys::flashAttnSetAttentionAlibiSlopes(self.raw, slopes, per_batch as i32))?;
        self.slopes = if slopes.is_null() { Slopes::None } else { Slopes::Device };
        Ok(())
    }

    pub fn clear_alibi_slopes(&mut self) -> Result<()> {
        check(unsafe { sys::flashAttnSetAttentionAlibiSlopes(self.raw, ptr::null(), 0) })?;
        self.slopes = Slopes::None;
        Ok(())
    }

    /// The slopes pointer the library holds (null when ALiBi is off) and the per-batch flag.
    pub fn alibi_slopes(&self) -> Result<(*const f32, bool)> {
        let mut p: *const f32 = ptr::null();
        let mut per_batch = 0i32;
        check(unsafe { sys::flashAttnGetAttentionAlibiSlopes(self.raw, &mut p, &mut per_batch) })?;
        Ok((p, per_batch != 0))
    }

    /// Attention sinks for HOST operations, copied into the descriptor: one logit per query head (`[heads]`) that
    /// joins every row's softmax denominator without a value (docs/semantics.md, Attention sinks). Forward,
    /// decode and backward read them; operations check the count against the heads before calling the library.
    pub fn set_sinks(&mut self, sinks: &[f32]) -> Result<()> {
        if sinks.is_empty() {
            return Err(Error::refused("sinks: empty (clear_sinks turns sinks off)".to_string()));
        }
        let owned: Box<[f32]> = sinks.into();
        check(unsafe { sys::flashAttnSetAttentionSinks(self.raw, owned.as_ptr()) })?;
        // As for the slopes: the old copy is freed only once the library points at the new one.
        self.sinks = Sinks::Host(owned);
        Ok(())
    }

    /// Attention sinks in device memory for CUDA operations; null turns sinks off.
    ///
    /// # Safety
    /// `sinks` must point to `heads` floats, 4-byte aligned, in the memory of the handles this descriptor is used
    /// with, and stay valid while any operation using the descriptor may run.
    pub unsafe fn set_sinks_device(&mut self, sinks: *const f32) -> Result<()> {
        check(sys::flashAttnSetAttentionSinks(self.raw, sinks))?;
        self.sinks = if sinks.is_null() { Sinks::None } else { Sinks::Device };
        Ok(())
    }

    pub fn clear_sinks(&mut self) -> Result<()> {
        check(unsafe { sys::flashAttnSetAttentionSinks(self.raw, ptr::null()) })?;
        self.sinks = Sinks::None;
        Ok(())
    }

    /// The sinks pointer the library holds (null when sinks are off): for host sinks, the descriptor's own copy.
    pub fn sinks(&self) -> Result<*const f32> {
        let mut p: *const f32 = ptr::null();
        check(unsafe { sys::flashAttnGetAttentionSinks(self.raw, &mut p) })?;
        Ok(p)
    }

    /// Where CUDA backwards write the sinks' gradient (`[heads]` FP32 in device memory, overwritten by each
    /// backward); null turns it off. On the HOST backend, [`Handle::backward_with_sinks_gradient`] takes a slice
    /// instead.
    ///
    /// # Safety
    /// `d_sinks` must point to `heads` floats, 4-byte aligned, in the memory of the handles this descriptor is used
    /// with, overlap no other argument of the backwards, and stay valid while any backward using the descriptor
    /// may run.
    pub unsafe fn set_sinks_gradient_device(&mut self, d_sinks: *mut f32) -> Result<()> {
        check(sys::flashAttnSetAttentionSinksGradient(self.raw, d_sinks))?;
        self.sinks_gradient_device = !d_sinks.is_null();
        Ok(())
    }

    pub fn clear_sinks_gradient(&mut self) -> Result<()> {
        check(unsafe { sys::flashAttnSetAttentionSinksGradient(self.raw, ptr::null_mut()) })?;
        self.sinks_gradient_device = false;
        Ok(())
    }

    /// The dSinks pointer the library holds (null when backwards do not compute it).
    pub fn sinks_gradient(&self) -> Result<*mut f32> {
        let mut p: *mut f32 = ptr::null_mut();
        check(unsafe { sys::flashAttnGetAttentionSinksGradient(self.raw, &mut p) })?;
        Ok(p)
    }
}

/// Points a descriptor's dSinks at a caller's slice for one HOST backward, and puts the previous pointer back when
/// dropped: even when the backward fails or panics, the library never keeps a pointer past the slice's borrow.
struct LentSinksGradient<'a> {
    attn: &'a mut AttentionDescriptor,
    previous: *mut f32,
    previous_device: bool,
    /// The library writes the slice through the pointer it was given: nobody else may touch it meanwhile.
    _d_sinks: PhantomData<&'a mut [f32]>,
}

impl<'a> LentSinksGradient<'a> {
    fn new(attn: &'a mut AttentionDescriptor, d_sinks: &'a mut [f32]) -> Result<LentSinksGradient<'a>> {
        let previous = attn.sinks_gradient()?;
        check(unsafe { sys::flashAttnSetAttentionSinksGradient(attn.raw, d_sinks.as_mut_ptr()) })?;
        let previous_device = std::mem::replace(&mut attn.sinks_gradient_device, false);
        Ok(LentSinksGradient { attn, previous, previous_device, _d_sinks: PhantomData })
    }
}

impl Drop for LentSinksGradient<'_> {
    fn drop(&mut self) {
        // The previous pointer was accepted once and the descriptor is alive, so setting it again cannot fail.
        unsafe { sys::flashAttnSetAttentionSinksGradient(self.attn.raw, self.previous) };
        self.attn.sinks_gradient_device = self.previous_device;
    }
}

impl Drop for AttentionDescriptor {
    fn drop(&mut self) {
        // Destroyed before `slopes` is freed (fields drop after this), so the library never holds a freed pointer.
        unsafe { sys::flashAttnDestroyAttentionDescriptor(self.raw) };
    }
}

// -----------------------------------------------------------------------------------------------------------------
// Sequence descriptor

#[derive(Default)]
struct SeqArrays {
    ragged: Option<(Box<[i32]>, Box<[i32]>)>,
    kv_lengths: Option<Box<[i32]>>,
    block_table: Option<Box<[i32]>>,
    /// Set once a device array is given: HOST operations then refuse the descriptor.
    device: bool,
}

/// Ragged batches, per-sequence KV lengths and paged KV caches. The library reads the arrays when an operation
/// runs; the safe setters copy host arrays into the descriptor so that they live as long as it does.
pub struct SeqDescriptor {
    raw: sys::flashAttnSeqDescriptor_t,
    arrays: SeqArrays,
}

unsafe impl Send for SeqDescriptor {}
unsafe impl Sync for SeqDescriptor {}

fn batch_of(name: &str, len: usize, minus: usize) -> Result<i64> {
    if len <= minus {
        return Err(Error::refused(format!("{}: {} elements is too few", name, len)));
    }
    i64::try_from(len - minus).map_err(|_| Error::refused(format!("{}: {} elements", name, len)))
}

impl SeqDescriptor {
    pub fn new() -> Result<SeqDescriptor> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::flashAttnCreateSeqDescriptor(&mut raw) })?;
        Ok(SeqDescriptor { raw, arrays: SeqArrays::default() })
    }

    /// Ragged batch of `cu_seqlens_q.len() - 1` sequences (prefix sums starting at 0).
    pub fn set_ragged(&mut self, cu_seqlens_q: &[i32], cu_seqlens_k: &[i32], max_q: i64, max_k: i64) -> Result<()> {
        if cu_seqlens_q.len() != cu_seqlens_k.len() {
            return Err(Error::refused(format!(
                "cu_seqlens_k: {} elements, cu_seqlens_q has {}",
                cu_seqlens_k.len(),
                cu_seqlens_q.len()
            )));
        }
        let batch = batch_of("cu_seqlens_q", cu_seqlens_q.len(), 1)?;
        let (q, k): (Box<[i32]>, Box<[i32]>) = (cu_seqlens_q.into(), cu_seqlens_k.into());
        check(unsafe { sys::flashAttnSetSeqRagged(self.raw, batch, q.as_ptr(), k.as_ptr(), max_q, max_k) })?;
        self.arrays.ragged = Some((q, k));
        Ok(())
    }

    /// Leaves ragged mode.
    pub fn clear_ragged(&mut self) -> Result<()> {
        check(unsafe { sys::flashAttnSetSeqRagged(self.raw, 1, ptr::null(), ptr::null(), 1, 1) })?;
        self.arrays.ragged = None;
        Ok(())
    }

    /// Used KV length of each sequence of a dense or paged cache.
    pub fn set_kv_lengths(&mut self, seqlens_k: &[i32]) -> Result<()> {
        let batch = batch_of("seqlens_k", seqlens_k.len(), 0)?;
        let owned: Box<[i32]> = seqlens_k.into();
        check(unsafe { sys::flashAttnSetSeqKvLengths(self.raw, batch, owned.as_ptr()) })?;
        self.arrays.kv_lengths = Some(owned);
        Ok(())
    }

    pub fn clear_kv_lengths(&mut self) -> Result<()> {
        check(unsafe { sys::flashAttnSetSeqKvLengths(self.raw, 0, ptr::null()) })?;
        self.arrays.kv_lengths = None;
        Ok(())
    }

    /// Paged cache: `block_table` is `[batch, max_pages_per_seq]`, row-major.
    pub fn set_paged(&mut self, block_table: &[i32], max_pages_per_seq: i64) -> Result<()> {
        if max_pages_per_seq < 1 || block_table.len() as i64 % max_pages_per_seq != 0 {
            return Err(Error::refused(format!(
                "block_table: {} elements are not whole rows of max_pages_per_seq = {}",
                block_table.len(),
                max_pages_per_seq
            )));
        }
        let batch = batch_of("block_table", block_table.len() / max_pages_per_seq as usize, 0)?;
        let owned: Box<[i32]> = block_table.into();
        check(unsafe { sys::flashAttnSetSeqPaged(self.raw, batch, owned.as_ptr(), max_pages_per_seq) })?;
        self.arrays.block_table = Some(owned);
        Ok(())
    }

    pub fn clear_paged(&mut self) -> Result<()> {
        check(unsafe { sys::flashAttnSetSeqPaged(self.raw, 0, ptr::null(), 1) })?;
        self.arrays.block_table = None;
        Ok(())
    }

    /// Ragged batch with arrays in device memory.
    ///
    /// # Safety
    /// Both arrays must hold `batch + 1` int32 in the memory of the handles this descriptor is used with and stay
    /// valid while any operation using the descriptor may run.
    pub unsafe fn set_ragged_device(
        &mut self,
        batch: i64,
        cu_seqlens_q: *const i32,
        cu_seqlens_k: *const i32,
        max_q: i64,
        max_k: i64,
    ) -> Result<()> {
        check(sys::flashAttnSetSeqRagged(self.raw, batch, cu_seqlens_q, cu_seqlens_k, max_q, max_k))?;
        self.arrays.ragged = None;
        self.arrays.device = true;
        Ok(())
    }

    /// KV lengths in device memory.
    ///
    /// # Safety
    /// As [`SeqDescriptor::set_ragged_device`], with `batch` int32.
    pub unsafe fn set_kv_lengths_device(&mut self, batch: i64, seqlens_k: *const i32) -> Result<()> {
        check(sys::flashAttnSetSeqKvLengths(self.raw, batch, seqlens_k))?;
        self.arrays.kv_lengths = None;
        self.arrays.device = true;
        Ok(())
    }

    /// Block table in device memory.
    ///
    /// # Safety
    /// As [`SeqDescriptor::set_ragged_device`], with `batch * max_pages_per_seq` int32.
    pub unsafe fn set_paged_device(&mut self, batch: i64, block_table: *const i32, max_pages_per_seq: i64) -> Result<()> {
        check(sys::flashAttnSetSeqPaged(self.raw, batch, block_table, max_pages_per_seq))?;
        self.arrays.block_table = None;
        self.arrays.device = true;
        Ok(())
    }

    /// (batch, max_q, max_k) of the ragged setting; batch 0 when not ragged.
    pub fn ragged(&self) -> Result<(i64, i64, i64)> {
        let (mut b, mut mq, mut mk) = (0i64, 0i64, 0i64);
        let (mut q, mut k): (*const i32, *const i32) = (ptr::null(), ptr::null());
        check(unsafe { sys::flashAttnGetSeqRagged(self.raw, &mut b, &mut q, &mut k, &mut mq, &mut mk) })?;
        Ok((b, mq, mk))
    }

    /// Batch of the KV lengths (0 when unset).
    pub fn kv_lengths_batch(&self) -> Result<i64> {
        let mut b = 0i64;
        let mut p: *const i32 = ptr::null();
        check(unsafe { sys::flashAttnGetSeqKvLengths(self.raw, &mut b, &mut p) })?;
        Ok(b)
    }

    /// (batch, max_pages_per_seq) of the paged setting; batch 0 when unset.
    pub fn paged(&self) -> Result<(i64, i64)> {
        let (mut b, mut m) = (0i64, 0i64);
        let mut p: *const i32 = ptr::null();
        check(unsafe { sys::flashAttnGetSeqPaged(self.raw, &mut b, &mut p, &mut m) })?;
        Ok((b, m))
    }

    fn ragged_batch(&self) -> Option<usize> {
        self.arrays.ragged.as_ref().map(|(q, _)| q.len() - 1)
    }
}

impl Drop for SeqDescriptor {
    fn drop(&mut self) {
        // As for the attention descriptor: the library object goes before the arrays it points to.
        unsafe { sys::flashAttnDestroySeqDescriptor(self.raw) };
    }
}

// -----------------------------------------------------------------------------------------------------------------
// Operation arguments

/// A host input tensor: descriptor and data.
pub struct Input<'a, T> {
    pub desc: &'a TensorDescriptor,
    pub data: &'a [T],
}

/// A host output tensor: descriptor and data.
pub struct Output<'a, T> {
    pub desc: &'a TensorDescriptor,
    pub data: &'a mut [T],
}

impl<'a, T> Input<'a, T> {
    pub fn new(desc: &'a TensorDescriptor, data: &'a [T]) -> Self {
        Input { desc, data }
    }
}

impl<'a, T> Output<'a, T> {
    pub fn new(desc: &'a TensorDescriptor, data: &'a mut [T]) -> Self {
        Output { desc, data }
    }
}

/// A tensor in the handle's memory (device memory on CUDA), for the `unsafe` operations.
#[derive(Clone, Copy)]
pub struct DeviceInput<'a> {
    pub desc: &'a TensorDescriptor,
    pub ptr: *const c_void,
}

/// An output tensor in the handle's memory.
#[derive(Clone, Copy)]
pub struct DeviceOutput<'a> {
    pub desc: &'a TensorDescriptor,
    pub ptr: *mut c_void,
}

/// What [`Handle::check_support`] reports for a configuration that runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Support {
    /// Kernel family, tile, accumulator precision and determinism, in the library's words.
    pub description: String,
    /// Repeated runs give bitwise identical results.
    pub deterministic: bool,
}

/// Checks a host slice against its descriptor before the library sees it.
fn check_slice<T: Element>(name: &str, desc: &TensorDescriptor, len: usize) -> Result<()> {
    if !T::stores(desc.data_type()) {
        return Err(Error::refused(format!(
            "{}: the descriptor's data type is {:?}, the slice holds {}",
            name,
            desc.data_type(),
            T::NAME
        )));
    }
    let span = desc.span()?;
    if len < span {
        return Err(Error::refused(format!(
            "{}: the slice has {} elements, its descriptor (dims {:?}, strides {:?}) spans {}",
            name,
            len,
            desc.dims(),
            desc.strides(),
            span
        )));
    }
    Ok(())
}

fn raw_attn(attn: Option<&AttentionDescriptor>) -> sys::flashAttnAttentionDescriptor_t {
    attn.map_or(ptr::null_mut(), |a| a.raw)
}

fn raw_seq(seq: Option<&SeqDescriptor>) -> sys::flashAttnSeqDescriptor_t {
    seq.map_or(ptr::null_mut(), |s| s.raw)
}

fn raw_desc(desc: Option<&TensorDescriptor>) -> sys::flashAttnTensorDescriptor_t {
    desc.map_or(ptr::null_mut(), |d| d.raw)
}

/// Host arrays the library will read on the host: only this crate's own copies are known to be long enough.
fn check_host_descriptors(
    attn: Option<&AttentionDescriptor>,
    seq: Option<&SeqDescriptor>,
    q: &TensorDescriptor,
) -> Result<()> {
    if let Some(seq) = seq {
        if seq.arrays.device {
            return Err(Error::refused(
                "seq: the sequence descriptor holds device arrays; a HOST operation needs host arrays".to_string(),
            ));
        }
    }
    if let Some(attn) = attn {
        match &attn.sinks {
            Sinks::None => {}
            Sinks::Device => {
                return Err(Error::refused(
                    "attn: the sinks are in device memory; a HOST operation needs host sinks".to_string(),
                ))
            }
            Sinks::Host(sinks) => {
                // Q is [batch, heads, seq, dim] or [tokens, heads, dim]: the heads are dims[1] either way.
                let heads = q.dims().get(1).map_or(0, |&h| h.max(0) as usize);
                if sinks.len() < heads {
                    return Err(Error::refused(format!(
                        "sinks: {} sinks, the operation reads {} (heads)",
                        sinks.len(),
                        heads
                    )));
                }
            }
        }
        match &attn.slopes {
            Slopes::None => {}
            Slopes::Device => {
                return Err(Error::refused(
                    "attn: the ALiBi slopes are in device memory; a HOST operation needs host slopes".to_string(),
                ))
            }
            Slopes::Host { slopes, per_batch } => {
                // Q is [batch, heads, seq, dim], or [tokens, heads, dim] with the batch in the ragged descriptor.
                let dims = q.dims();
                if dims.len() >= 2 {
                    let heads = dims[1].max(0) as usize;
                    let batch = match seq.and_then(SeqDescriptor::ragged_batch) {
                        Some(b) if dims.len() == 3 => b,
                        _ => dims[0].max(0) as usize,
                    };
                    let need = if *per_batch { batch * heads } else { heads };
                    if slopes.len() < need {
                        return Err(Error::refused(format!(
                            "alibi slopes: {} slopes, the operation reads {} ({})",
                            slopes.len(),
                            need,
                            if *per_batch { "batch x heads" } else { "heads" }
                        )));
                    }
                }
            }
        }
    }
    Ok(())
}

// -----------------------------------------------------------------------------------------------------------------
// Handle

/// A library handle: backend, device, stream. Serves one thread at a time (it is `Send`, not `Sync`; operations
/// take `&mut self`). HOST operations use a workspace the handle owns and grows as needed.
pub struct Handle {
    raw: sys::flashAttnHandle_t,
    backend: Backend,
    workspace: Vec<u8>,
}

unsafe impl Send for Handle {}

const WORKSPACE_ALIGN: usize = 256;

impl Handle {
    /// A handle on the AUTO backend: CUDA when a usable GPU is present, else HOST.
    pub fn new() -> Result<Handle> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::flashAttnCreate(&mut raw) })?;
        Handle::adopt(raw)
    }

    pub fn with_backend(backend: Backend) -> Result<Handle> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::flashAttnCreateWithBackend(&mut raw, backend.to_raw()) })?;
        Handle::adopt(raw)
    }

    fn adopt(raw: sys::flashAttnHandle_t) -> Result<Handle> {
        let mut handle = Handle { raw, backend: Backend::Host, workspace: Vec::new() };
        let mut b = 0;
        check(unsafe { sys::flashAttnGetBackend(raw, &mut b) })?;
        handle.backend = Backend::from_raw(b)
            .ok_or_else(|| Error::refused(format!("the library reports an unknown backend {}", b)))?;
        Ok(handle)
    }

    /// CUDA or HOST (never AUTO).
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Binds a CUDA stream (a `cudaStream_t`); null is the default stream. The HOST backend ignores it.
    ///
    /// # Safety
    /// `stream` must be null or a live stream of the handle's device, and outlive its use by this handle.
    pub unsafe fn set_stream(&mut self, stream: *mut c_void) -> Result<()> {
        check(sys::flashAttnSetStream(self.raw, stream as *mut sys::CUstream_st))
    }

    pub fn stream(&self) -> Result<*mut c_void> {
        let mut s: *mut sys::CUstream_st = ptr::null_mut();
        check(unsafe { sys::flashAttnGetStream(self.raw, &mut s) })?;
        Ok(s as *mut c_void)
    }

    fn require_host(&self, what: &str) -> Result<()> {
        if self.backend != Backend::Host {
            return Err(Error::refused(format!(
                "{}: the handle runs on {:?}; slices are host memory, so use a HOST handle, or the `_device` \
                 operation with device pointers",
                what, self.backend
            )));
        }
        Ok(())
    }

    /// A 256-byte aligned pointer to at least `bytes` bytes of the handle's workspace (null for 0).
    fn host_workspace(&mut self, bytes: usize) -> *mut c_void {
        if bytes == 0 {
            return ptr::null_mut();
        }
        let need = bytes + WORKSPACE_ALIGN;
        if self.workspace.len() < need {
            self.workspace = vec![0u8; need];
        }
        let base = self.workspace.as_mut_ptr();
        let offset = (WORKSPACE_ALIGN - (base as usize) % WORKSPACE_ALIGN) % WORKSPACE_ALIGN;
        unsafe { base.add(offset) as *mut c_void }
    }

    /// Says, without running anything, whether a configuration runs on this handle and what serves it. For merge,
    /// `q` is the partial O descriptor and `k`, `v` are None. An unsupported configuration is an `Err` with
    /// `Status::NotSupported` and the reason.
    #[allow(clippy::too_many_arguments)]
    pub fn check_support(
        &self,
        operation: Operation,
        attn: Option<&AttentionDescriptor>,
        seq: Option<&SeqDescriptor>,
        q: &TensorDescriptor,
        k: Option<&TensorDescriptor>,
        v: Option<&TensorDescriptor>,
        o: &TensorDescriptor,
    ) -> Result<Support> {
        let mut text = vec![0u8; 512];
        let mut deterministic = 0i32;
        check(unsafe {
            sys::flashAttnCheckSupport(
                self.raw,
                operation.to_raw(),
                raw_attn(attn),
                raw_seq(seq),
                q.raw,
                raw_desc(k),
                raw_desc(v),
                o.raw,
                text.as_mut_ptr() as *mut c_char,
                text.len(),
                &mut deterministic,
            )
        })?;
        let end = text.iter().position(|&c| c == 0).unwrap_or(text.len());
        text.truncate(end);
        Ok(Support { description: String::from_utf8_lossy(&text).into_owned(), deterministic: deterministic != 0 })
    }

    #[allow(clippy::too_many_arguments)]
    pub fn forward_workspace_size(
        &self,
        attn: Option<&AttentionDescriptor>,
        seq: Option<&SeqDescriptor>,
        q: &TensorDescriptor,
        k: &TensorDescriptor,
        v: &TensorDescriptor,
        o: &TensorDescriptor,
        lse: Option<&TensorDescriptor>,
    ) -> Result<usize> {
        let mut bytes = 0usize;
        check(unsafe {
            sys::flashAttnForwardGetWorkspaceSize(
                self.raw,
                raw_attn(attn),
                raw_seq(seq),
                q.raw,
                k.raw,
                v.raw,
                o.raw,
                raw_desc(lse),
                &mut bytes,
            )
        })?;
        Ok(bytes)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn backward_workspace_size(
        &self,
        attn: Option<&AttentionDescriptor>,
        seq: Option<&SeqDescriptor>,
        q: &TensorDescriptor,
        k: &TensorDescriptor,
        v: &TensorDescriptor,
        o: &TensorDescriptor,
        lse: &TensorDescriptor,
    ) -> Result<usize> {
        let mut bytes = 0usize;
        check(unsafe {
            sys::flashAttnBackwardGetWorkspaceSize(
                self.raw,
                raw_attn(attn),
                raw_seq(seq),
                q.raw,
                k.raw,
                v.raw,
                o.raw,
                lse.raw,
                &mut bytes,
            )
        })?;
        Ok(bytes)
    }

    /// The exact workspace of a backward whose gradients may have strides of their own (the plain query sizes them
    /// in the strides of O, Q, K and V).
    #[allow(clippy::too_many_arguments)]
    pub fn backward_workspace_size_with_gradients(
        &self,
        attn: Option<&AttentionDescriptor>,
        seq: Option<&SeqDescriptor>,
        q: &TensorDescriptor,
        k: &TensorDescriptor,
        v: &TensorDescriptor,
        o: &TensorDescriptor,
        d_o: &TensorDescriptor,
        lse: &TensorDescriptor,
        dq: &TensorDescriptor,
        dk: &TensorDescriptor,
        dv: &TensorDescriptor,
    ) -> Result<usize> {
        let mut bytes = 0usize;
        check(unsafe {
            sys::flashAttnBackwardGetWorkspaceSizeWithGradients(
                self.raw,
                raw_attn(attn),
                raw_seq(seq),
                q.raw,
                k.raw,
                v.raw,
                o.raw,
                d_o.raw,
                lse.raw,
                dq.raw,
                dk.raw,
                dv.raw,
                &mut bytes,
            )
        })?;
        Ok(bytes)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn decode_chunk_workspace_size(
        &self,
        attn: Option<&AttentionDescriptor>,
        seq: Option<&SeqDescriptor>,
        q: &TensorDescriptor,
        k: &TensorDescriptor,
        v: &TensorDescriptor,
        o: &TensorDescriptor,
        lse: Option<&TensorDescriptor>,
        num_chunks: i32,
    ) -> Result<usize> {
        let mut bytes = 0usize;
        check(unsafe {
            sys::flashAttnDecodeChunkGetWorkspaceSize(
                self.raw,
                raw_attn(attn),
                raw_seq(seq),
                q.raw,
                k.raw,
                v.raw,
                o.raw,
                raw_desc(lse),
                num_chunks,
                &mut bytes,
            )
        })?;
        Ok(bytes)
    }

    pub fn merge_states_workspace_size(
        &self,
        partial_o: &TensorDescriptor,
        partial_lse: &TensorDescriptor,
        o: &TensorDescriptor,
        lse: Option<&TensorDescriptor>,
    ) -> Result<usize> {
        let mut bytes = 0usize;
        check(unsafe {
            sys::flashAttnMergeStatesGetWorkspaceSize(
                self.raw,
                partial_o.raw,
                partial_lse.raw,
                o.raw,
                raw_desc(lse),
                &mut bytes,
            )
        })?;
        Ok(bytes)
    }

    /// O = softmax(mask(softcap(scale Q K^T) + alibi)) V and optionally LSE, on the HOST backend; with sinks in
    /// `attn`, each row's softmax denominator also holds exp(sink of its head).
    #[allow(clippy::too_many_arguments)]
    pub fn forward<T: Element>(
        &mut self,
        attn: Option<&AttentionDescriptor>,
        seq: Option<&SeqDescriptor>,
        q: Input<T>,
        k: Input<T>,
        v: Input<T>,
        o: Output<T>,
        lse: Option<Output<f32>>,
    ) -> Result<()> {
        self.require_host("forward")?;
        check_slice::<T>("q", q.desc, q.data.len())?;
        check_slice::<T>("k", k.desc, k.data.len())?;
        check_slice::<T>("v", v.desc, v.data.len())?;
        check_slice::<T>("o", o.desc, o.data.len())?;
        if let Some(l) = &lse {
            check_slice::<f32>("lse", l.desc, l.data.len())?;
        }
        check_host_descriptors(attn, seq, q.desc)?;
        let lse_desc = lse.as_ref().map(|l| l.desc);
        let bytes = self.forward_workspace_size(attn, seq, q.desc, k.desc, v.desc, o.desc, lse_desc)?;
        let workspace = self.host_workspace(bytes);
        let (lse_raw, lse_ptr) = match lse {
            Some(l) => (l.desc.raw, l.data.as_mut_ptr()),
            None => (ptr::null_mut(), ptr::null_mut()),
        };
        check(unsafe {
            sys::flashAttnForward(
                self.raw,
                raw_attn(attn),
                raw_seq(seq),
                q.desc.raw,
                q.data.as_ptr() as *const c_void,
                k.desc.raw,
                k.data.as_ptr() as *const c_void,
                v.desc.raw,
                v.data.as_ptr() as *const c_void,
                o.desc.raw,
                o.data.as_mut_ptr() as *mut c_void,
                lse_raw,
                lse_ptr,
                workspace,
                bytes,
            )
        })
    }

    /// dQ, dK, dV of [`Handle::forward`] given dO and the forward's O and LSE, on the HOST backend. With sinks in
    /// `attn` (those the forward had), the gradients are those of attention with sinks; their own gradient comes
    /// from [`Handle::backward_with_sinks_gradient`].
    #[allow(clippy::too_many_arguments)]
    pub fn backward<T: Element>(
        &mut self,
        attn: Option<&AttentionDescriptor>,
        seq: Option<&SeqDescriptor>,
        q: Input<T>,
        k: Input<T>,
        v: Input<T>,
        o: Input<T>,
        d_o: Input<T>,
        lse: Input<f32>,
        dq: Output<T>,
        dk: Output<T>,
        dv: Output<T>,
    ) -> Result<()> {
        self.require_host("backward")?;
        if attn.map_or(false, |a| a.sinks_gradient_device) {
            return Err(Error::refused(
                "attn: the sinks gradient is in device memory, and a HOST backward would write it; use \
                 backward_with_sinks_gradient with a slice"
                    .to_string(),
            ));
        }
        self.host_backward(attn, seq, q, k, v, o, d_o, lse, dq, dk, dv)
    }

    /// [`Handle::backward`] that also writes the sinks' gradient into `d_sinks` (`[heads]`, overwritten, never
    /// accumulated into): dSinks[h] = -sum over the batch and the rows of head h of exp(s_h - LSE) (dO . O).
    /// `attn` must hold the forward's sinks. Its dSinks pointer is `d_sinks` only for the call, which is why the
    /// descriptor is borrowed mutably: no other operation can use it meanwhile, and it points back where it did
    /// (null, or a device pointer) when the call returns.
    #[allow(clippy::too_many_arguments)]
    pub fn backward_with_sinks_gradient<T: Element>(
        &mut self,
        attn: &mut AttentionDescriptor,
        seq: Option<&SeqDescriptor>,
        q: Input<T>,
        k: Input<T>,
        v: Input<T>,
        o: Input<T>,
        d_o: Input<T>,
        lse: Input<f32>,
        dq: Output<T>,
        dk: Output<T>,
        dv: Output<T>,
        d_sinks: &mut [f32],
    ) -> Result<()> {
        self.require_host("backward_with_sinks_gradient")?;
        let heads = q.desc.dims().get(1).map_or(0, |&h| h.max(0) as usize);
        if d_sinks.len() < heads {
            return Err(Error::refused(format!(
                "d_sinks: the slice has {} elements, the backward writes {} (heads)",
                d_sinks.len(),
                heads
            )));
        }
        let lent = LentSinksGradient::new(attn, d_sinks)?;
        self.host_backward(Some(&*lent.attn), seq, q, k, v, o, d_o, lse, dq, dk, dv)
    }

    #[allow(clippy::too_many_arguments)]
    fn host_backward<T: Element>(
        &mut self,
        attn: Option<&AttentionDescriptor>,
        seq: Option<&SeqDescriptor>,
        q: Input<T>,
        k: Input<T>,
        v: Input<T>,
        o: Input<T>,
        d_o: Input<T>,
        lse: Input<f32>,
        dq: Output<T>,
        dk: Output<T>,
        dv: Output<T>,
    ) -> Result<()> {
        check_slice::<T>("q", q.desc, q.data.len())?;
        check_slice::<T>("k", k.desc, k.data.len())?;
        check_slice::<T>("v", v.desc, v.data.len())?;
        check_slice::<T>("o", o.desc, o.data.len())?;
        check_slice::<T>("do", d_o.desc, d_o.data.len())?;
        check_slice::<f32>("lse", lse.desc, lse.data.len())?;
        check_slice::<T>("dq", dq.desc, dq.data.len())?;
        check_slice::<T>("dk", dk.desc, dk.data.len())?;
        check_slice::<T>("dv", dv.desc, dv.data.len())?;
        check_host_descriptors(attn, seq, q.desc)?;
        let bytes = self.backward_workspace_size_with_gradients(
            attn, seq, q.desc, k.desc, v.desc, o.desc, d_o.desc, lse.desc, dq.desc, dk.desc, dv.desc,
        )?;
        let workspace = self.host_workspace(bytes);
        check(unsafe {
            sys::flashAttnBackward(
                self.raw,
                raw_attn(attn),
                raw_seq(seq),
                q.desc.raw,
                q.data.as_ptr() as *const c_void,
                k.desc.raw,
                k.data.as_ptr() as *const c_void,
                v.desc.raw,
                v.data.as_ptr() as *const c_void,
                o.desc.raw,
                o.data.as_ptr() as *const c_void,
                d_o.desc.raw,
                d_o.data.as_ptr() as *const c_void,
                lse.desc.raw,
                lse.data.as_ptr(),
                dq.desc.raw,
                dq.data.as_mut_ptr() as *mut c_void,
                dk.desc.raw,
                dk.data.as_mut_ptr() as *mut c_void,
                dv.desc.raw,
                dv.data.as_mut_ptr() as *mut c_void,
                workspace,
                bytes,
            )
        })
    }

    /// Split-KV decode against a dense or paged KV cache, on the HOST backend. `num_chunks` 0 chooses. Sinks in
    /// `attn` join each row once, whatever the chunk count, so the result is the forward's.
    #[allow(clippy::too_many_arguments)]
    pub fn decode_chunk<T: Element>(
        &mut self,
        attn: Option<&AttentionDescriptor>,
        seq: Option<&SeqDescriptor>,
        q: Input<T>,
        k: Input<T>,
        v: Input<T>,
        o: Output<T>,
        lse: Option<Output<f32>>,
        num_chunks: i32,
    ) -> Result<()> {
        self.require_host("decode_chunk")?;
        check_slice::<T>("q", q.desc, q.data.len())?;
        check_slice::<T>("k", k.desc, k.data.len())?;
        check_slice::<T>("v", v.desc, v.data.len())?;
        check_slice::<T>("o", o.desc, o.data.len())?;
        if let Some(l) = &lse {
            check_slice::<f32>("lse", l.desc, l.data.len())?;
        }
        check_host_descriptors(attn, seq, q.desc)?;
        let lse_desc = lse.as_ref().map(|l| l.desc);
        let bytes =
            self.decode_chunk_workspace_size(attn, seq, q.desc, k.desc, v.desc, o.desc, lse_desc, num_chunks)?;
        let workspace = self.host_workspace(bytes);
        let (lse_raw, lse_ptr) = match lse {
            Some(l) => (l.desc.raw, l.data.as_mut_ptr()),
            None => (ptr::null_mut(), ptr::null_mut()),
        };
        check(unsafe {
            sys::flashAttnDecodeChunk(
                self.raw,
                raw_attn(attn),
                raw_seq(seq),
                q.desc.raw,
                q.data.as_ptr() as *const c_void,
                k.desc.raw,
                k.data.as_ptr() as *const c_void,
                v.desc.raw,
                v.data.as_ptr() as *const c_void,
                o.desc.raw,
                o.data.as_mut_ptr() as *mut c_void,
                lse_raw,
                lse_ptr,
                num_chunks,
                workspace,
                bytes,
            )
        })
    }

    /// Merges partial attention states (FP32) into O and optionally LSE, on the HOST backend.
    pub fn merge_states<T: Element>(
        &mut self,
        partial_o: Input<f32>,
        partial_lse: Input<f32>,
        o: Output<T>,
        lse: Option<Output<f32>>,
    ) -> Result<()> {
        self.require_host("merge_states")?;
        check_slice::<f32>("partial_o", partial_o.desc, partial_o.data.len())?;
        check_slice::<f32>("partial_lse", partial_lse.desc, partial_lse.data.len())?;
        check_slice::<T>("o", o.desc, o.data.len())?;
        if let Some(l) = &lse {
            check_slice::<f32>("lse", l.desc, l.data.len())?;
        }
        let lse_desc = lse.as_ref().map(|l| l.desc);
        let bytes = self.merge_states_workspace_size(partial_o.desc, partial_lse.desc, o.desc, lse_desc)?;
        let workspace = self.host_workspace(bytes);
        let (lse_raw, lse_ptr) = match lse {
            Some(l) => (l.desc.raw, l.data.as_mut_ptr()),
            None => (ptr::null_mut(), ptr::null_mut()),
        };
        check(unsafe {
            sys::flashAttnMergeStates(
                self.raw,
                partial_o.desc.raw,
                partial_o.data.as_ptr(),
                partial_lse.desc.raw,
                partial_lse.data.as_ptr(),
                o.desc.raw,
                o.data.as_mut_ptr() as *mut c_void,
                lse_raw,
                lse_ptr,
                workspace,
                bytes,
            )
        })
    }

    /// [`Handle::forward`] on pointers in the handle's memory (device memory for CUDA), queued on its stream.
    ///
    /// # Safety
    /// Every pointer must address its descriptor's span in the handle's memory, aligned as the header requires;
    /// outputs must not overlap inputs; `workspace` must hold `workspace_bytes` (at least
    /// [`Handle::forward_workspace_size`]), 256-byte aligned; everything must stay valid until the stream has run
    /// the operation.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn forward_device(
        &mut self,
        attn: Option<&AttentionDescriptor>,
        seq: Option<&SeqDescriptor>,
        q: DeviceInput,
        k: DeviceInput,
        v: DeviceInput,
        o: DeviceOutput,
        lse: Option<DeviceOutput>,
        workspace: *mut c_void,
        workspace_bytes: usize,
    ) -> Result<()> {
        check(sys::flashAttnForward(
            self.raw,
            raw_attn(attn),
            raw_seq(seq),
            q.desc.raw,
            q.ptr,
            k.desc.raw,
            k.ptr,
            v.desc.raw,
            v.ptr,
            o.desc.raw,
            o.ptr,
            lse.map_or(ptr::null_mut(), |l| l.desc.raw),
            lse.map_or(ptr::null_mut(), |l| l.ptr as *mut f32),
            workspace,
            workspace_bytes,
        ))
    }

    /// [`Handle::backward`] on pointers in the handle's memory.
    ///
    /// # Safety
    /// As [`Handle::forward_device`], with [`Handle::backward_workspace_size`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn backward_device(
        &mut self,
        attn: Option<&AttentionDescriptor>,
        seq: Option<&SeqDescriptor>,
        q: DeviceInput,
        k: DeviceInput,
        v: DeviceInput,
        o: DeviceInput,
        d_o: DeviceInput,
        lse: DeviceInput,
        dq: DeviceOutput,
        dk: DeviceOutput,
        dv: DeviceOutput,
        workspace: *mut c_void,
        workspace_bytes: usize,
    ) -> Result<()> {
        check(sys::flashAttnBackward(
            self.raw,
            raw_attn(attn),
            raw_seq(seq),
            q.desc.raw,
            q.ptr,
            k.desc.raw,
            k.ptr,
            v.desc.raw,
            v.ptr,
            o.desc.raw,
            o.ptr,
            d_o.desc.raw,
            d_o.ptr,
            lse.desc.raw,
            lse.ptr as *const f32,
            dq.desc.raw,
            dq.ptr,
            dk.desc.raw,
            dk.ptr,
            dv.desc.raw,
            dv.ptr,
            workspace,
            workspace_bytes,
        ))
    }

    /// [`Handle::decode_chunk`] on pointers in the handle's memory.
    ///
    /// # Safety
    /// As [`Handle::forward_device`], with [`Handle::decode_chunk_workspace_size`] for the same `num_chunks`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn decode_chunk_device(
        &mut self,
        attn: Option<&AttentionDescriptor>,
        seq: Option<&SeqDescriptor>,
        q: DeviceInput,
        k: DeviceInput,
        v: DeviceInput,
        o: DeviceOutput,
        lse: Option<DeviceOutput>,
        num_chunks: i32,
        workspace: *mut c_void,
        workspace_bytes: usize,
    ) -> Result<()> {
        check(sys::flashAttnDecodeChunk(
            self.raw,
            raw_attn(attn),
            raw_seq(seq),
            q.desc.raw,
            q.ptr,
            k.desc.raw,
            k.ptr,
            v.desc.raw,
            v.ptr,
            o.desc.raw,
            o.ptr,
            lse.map_or(ptr::null_mut(), |l| l.desc.raw),
            lse.map_or(ptr::null_mut(), |l| l.ptr as *mut f32),
            num_chunks,
            workspace,
            workspace_bytes,
        ))
    }

    /// [`Handle::merge_states`] on pointers in the handle's memory.
    ///
    /// # Safety
    /// As [`Handle::forward_device`], with [`Handle::merge_states_workspace_size`].
    pub unsafe fn merge_states_device(
        &mut self,
        partial_o: DeviceInput,
        partial_lse: DeviceInput,
        o: DeviceOutput,
        lse: Option<DeviceOutput>,
        workspace: *mut c_void,
        workspace_bytes: usize,
    ) -> Result<()> {
        check(sys::flashAttnMergeStates(
            self.raw,
            partial_o.desc.raw,
            partial_o.ptr as *const f32,
            partial_lse.desc.raw,
            partial_lse.ptr as *const f32,
            o.desc.raw,
            o.ptr,
            lse.map_or(ptr::null_mut(), |l| l.desc.raw),
            lse.map_or(ptr::null_mut(), |l| l.ptr as *mut f32),
            workspace,
            workspace_bytes,
        ))
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // The workspace Vec is freed after this, once the library is done with the handle.
        unsafe { sys::flashAttnDestroy(self.raw) };
    }
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Handle({:?})", self.backend)
    }
}
