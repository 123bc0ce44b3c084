//! Raw declarations of libflashattn's C API, `<flashattn/flashattn.h>`, one for one.
//!
//! Names, parameter names and values are the header's, so the header's documentation applies unchanged. Enums are
//! plain integer type aliases with one constant per value rather than Rust enums: the library may return a value
//! this crate does not know yet (a newer minor version), and a Rust enum holding an unknown discriminant would be
//! undefined behaviour. `tests/spec.rs` checks this file against bindings/spec/flashattn_api.json.
//!
//! The safe interface is the `flashattn` crate.
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

use std::marker::{PhantomData, PhantomPinned};
// std::os::raw rather than core::ffi: the latter's c_char needs Rust 1.64, and Debian 12 ships 1.63.
use std::os::raw::{c_char, c_void};

// ----------------------------------------------------------------------------------------------------------------
// Enumerations (C enums are int-sized on every ABI the library builds for).

pub type flashAttnStatus_t = i32;
pub const FLASHATTN_STATUS_SUCCESS: flashAttnStatus_t = 0;
pub const FLASHATTN_STATUS_NOT_INITIALIZED: flashAttnStatus_t = 1;
pub const FLASHATTN_STATUS_BAD_PARAM: flashAttnStatus_t = 2;
pub const FLASHATTN_STATUS_NOT_SUPPORTED: flashAttnStatus_t = 3;
pub const FLASHATTN_STATUS_INSUFFICIENT_WORKSPACE: flashAttnStatus_t = 4;
pub const FLASHATTN_STATUS_ALLOC_FAILED: flashAttnStatus_t = 5;
pub const FLASHATTN_STATUS_ARCH_MISMATCH: flashAttnStatus_t = 6;
pub const FLASHATTN_STATUS_NO_DEVICE: flashAttnStatus_t = 7;
pub const FLASHATTN_STATUS_EXECUTION_FAILED: flashAttnStatus_t = 8;
pub const FLASHATTN_STATUS_INTERNAL_ERROR: flashAttnStatus_t = 9;

pub type flashAttnBackend_t = i32;
pub const FLASHATTN_BACKEND_AUTO: flashAttnBackend_t = 0;
pub const FLASHATTN_BACKEND_CUDA: flashAttnBackend_t = 1;
pub const FLASHATTN_BACKEND_HOST: flashAttnBackend_t = 2;

pub type flashAttnDataType_t = i32;
pub const FLASHATTN_DATA_FP16: flashAttnDataType_t = 0;
pub const FLASHATTN_DATA_BF16: flashAttnDataType_t = 1;
pub const FLASHATTN_DATA_FP32: flashAttnDataType_t = 2;

pub type flashAttnMaskMode_t = i32;
pub const FLASHATTN_MASK_NONE: flashAttnMaskMode_t = 0;
pub const FLASHATTN_MASK_CAUSAL_TOP_LEFT: flashAttnMaskMode_t = 1;
pub const FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT: flashAttnMaskMode_t = 2;

pub type flashAttnOperation_t = i32;
pub const FLASHATTN_OP_FORWARD: flashAttnOperation_t = 0;
pub const FLASHATTN_OP_BACKWARD: flashAttnOperation_t = 1;
pub const FLASHATTN_OP_DECODE_CHUNK: flashAttnOperation_t = 2;
pub const FLASHATTN_OP_MERGE_STATES: flashAttnOperation_t = 3;

/// Largest rank a tensor descriptor holds.
pub const FLASHATTN_MAX_TENSOR_RANK: i32 = 8;

// ----------------------------------------------------------------------------------------------------------------
// Opaque objects: zero-sized, unconstructible, neither Send nor Sync nor Unpin, only ever behind a pointer.

macro_rules! opaque {
    ($name:ident) => {
        #[repr(C)]
        pub struct $name {
            _private: [u8; 0],
            _marker: PhantomData<(*mut u8, PhantomPinned)>,
        }
    };
}

opaque!(CUstream_st);
opaque!(flashAttnContext);
opaque!(flashAttnTensorStruct);
opaque!(flashAttnAttentionStruct);
opaque!(flashAttnSeqStruct);

pub type flashAttnHandle_t = *mut flashAttnContext;
pub type flashAttnTensorDescriptor_t = *mut flashAttnTensorStruct;
pub type flashAttnAttentionDescriptor_t = *mut flashAttnAttentionStruct;
pub type flashAttnSeqDescriptor_t = *mut flashAttnSeqStruct;

// ----------------------------------------------------------------------------------------------------------------
// Functions, in the header's order.

extern "C" {
    pub fn flashAttnGetVersion() -> i32;
    pub fn flashAttnGetErrorString(status: flashAttnStatus_t) -> *const c_char;
    pub fn flashAttnGetLastErrorMessage(buf: *mut c_char, len: usize) -> usize;

    pub fn flashAttnCreate(handle: *mut flashAttnHandle_t) -> flashAttnStatus_t;
    pub fn flashAttnCreateWithBackend(handle: *mut flashAttnHandle_t, backend: flashAttnBackend_t)
        -> flashAttnStatus_t;
    pub fn flashAttnDestroy(handle: flashAttnHandle_t) -> flashAttnStatus_t;
    pub fn flashAttnGetBackend(handle: flashAttnHandle_t, backend: *mut flashAttnBackend_t) -> flashAttnStatus_t;
    pub fn flashAttnSetStream(handle: flashAttnHandle_t, stream: *mut CUstream_st) -> flashAttnStatus_t;
    pub fn flashAttnGetStream(handle: flashAttnHandle_t, stream: *mut *mut CUstream_st) -> flashAttnStatus_t;

    pub fn flashAttnCreateTensorDescriptor(desc: *mut flashAttnTensorDescriptor_t) -> flashAttnStatus_t;
    pub fn flashAttnSetTensorDescriptor(
        desc: flashAttnTensorDescriptor_t,
        dataType: flashAttnDataType_t,
        rank: i32,
        dims: *const i64,
        strides: *const i64,
    ) -> flashAttnStatus_t;
    pub fn flashAttnGetTensorDescriptor(
        desc: flashAttnTensorDescriptor_t,
        maxRank: i32,
        dataType: *mut flashAttnDataType_t,
        rank: *mut i32,
        dims: *mut i64,
        strides: *mut i64,
    ) -> flashAttnStatus_t;
    pub fn flashAttnDestroyTensorDescriptor(desc: flashAttnTensorDescriptor_t) -> flashAttnStatus_t;

    pub fn flashAttnCreateAttentionDescriptor(desc: *mut flashAttnAttentionDescriptor_t) -> flashAttnStatus_t;
    pub fn flashAttnDestroyAttentionDescriptor(desc: flashAttnAttentionDescriptor_t) -> flashAttnStatus_t;
    pub fn flashAttnSetAttentionScale(desc: flashAttnAttentionDescriptor_t, scale: f32) -> flashAttnStatus_t;
    pub fn flashAttnGetAttentionScale(desc: flashAttnAttentionDescriptor_t, scale: *mut f32) -> flashAttnStatus_t;
    pub fn flashAttnSetAttentionMask(desc: flashAttnAttentionDescriptor_t, mask: flashAttnMaskMode_t)
        -> flashAttnStatus_t;
    pub fn flashAttnGetAttentionMask(desc: flashAttnAttentionDescriptor_t, mask: *mut flashAttnMaskMode_t)
        -> flashAttnStatus_t;
    pub fn flashAttnSetAttentionWindow(desc: flashAttnAttentionDescriptor_t, left: i64, right: i64)
        -> flashAttnStatus_t;
    pub fn flashAttnGetAttentionWindow(desc: flashAttnAttentionDescriptor_t, left: *mut i64, right: *mut i64)
        -> flashAttnStatus_t;
    pub fn flashAttnSetAttentionSoftcap(desc: flashAttnAttentionDescriptor_t, softcap: f32) -> flashAttnStatus_t;
    pub fn flashAttnGetAttentionSoftcap(desc: flashAttnAttentionDescriptor_t, softcap: *mut f32)
        -> flashAttnStatus_t;
    pub fn flashAttnSetAttentionAlibiSlopes(
        desc: flashAttnAttentionDescriptor_t,
        slopes: *const f32,
        perBatch: i32,
    ) -> flashAttnStatus_t;
    pub fn flashAttnGetAttentionAlibiSlopes(
        desc: flashAttnAttentionDescriptor_t,
        slopes: *mut *const f32,
        perBatch: *mut i32,
    ) -> flashAttnStatus_t;
    pub fn flashAttnSetAttentionSinks(desc: flashAttnAttentionDescriptor_t, sinks: *const f32) -> flashAttnStatus_t;
    pub fn flashAttnGetAttentionSinks(desc: flashAttnAttentionDescriptor_t, sinks: *mut *const f32)
        -> flashAttnStatus_t;
    pub fn flashAttnSetAttentionSinksGradient(desc: flashAttnAttentionDescriptor_t, dSinks: *mut f32)
        -> flashAttnStatus_t;
    pub fn flashAttnGetAttentionSinksGradient(desc: flashAttnAttentionDescriptor_t, dSinks: *mut *mut f32)
        -> flashAttnStatus_t;
    pub fn flashAttnSetAttentionDeterministic(desc: flashAttnAttentionDescriptor_t, deterministic: i32)
        -> flashAttnStatus_t;
    pub fn flashAttnGetAttentionDeterministic(desc: flashAttnAttentionDescriptor_t, deterministic: *mut i32)
        -> flashAttnStatus_t;

    pub fn flashAttnCreateSeqDescriptor(desc: *mut flashAttnSeqDescriptor_t) -> flashAttnStatus_t;
    pub fn flashAttnDestroySeqDescriptor(desc: flashAttnSeqDescriptor_t) -> flashAttnStatus_t;
    pub fn flashAttnSetSeqRagged(
        desc: flashAttnSeqDescriptor_t,
        batch: i64,
        cuSeqlensQ: *const i32,
        cuSeqlensK: *const i32,
        maxSeqlenQ: i64,
        maxSeqlenK: i64,
    ) -> flashAttnStatus_t;
    pub fn flashAttnGetSeqRagged(
        desc: flashAttnSeqDescriptor_t,
        batch: *mut i64,
        cuSeqlensQ: *mut *const i32,
        cuSeqlensK: *mut *const i32,
        maxSeqlenQ: *mut i64,
        maxSeqlenK: *mut i64,
    ) -> flashAttnStatus_t;
    pub fn flashAttnSetSeqKvLengths(desc: flashAttnSeqDescriptor_t, batch: i64, seqlensK: *const i32)
        -> flashAttnStatus_t;
    pub fn flashAttnGetSeqKvLengths(desc: flashAttnSeqDescriptor_t, batch: *mut i64, seqlensK: *mut *const i32)
        -> flashAttnStatus_t;
    pub fn flashAttnSetSeqPaged(
        desc: flashAttnSeqDescriptor_t,
        batch: i64,
        blockTable: *const i32,
        maxPagesPerSeq: i64,
    ) -> flashAttnStatus_t;
    pub fn flashAttnGetSeqPaged(
        desc: flashAttnSeqDescriptor_t,
        batch: *mut i64,
        blockTable: *mut *const i32,
        maxPagesPerSeq: *mut i64,
    ) -> flashAttnStatus_t;

    pub fn flashAttnCheckSupport(
        handle: flashAttnHandle_t,
        operation: flashAttnOperation_t,
        attnDesc: flashAttnAttentionDescriptor_t,
        seqDesc: flashAttnSeqDescriptor_t,
        qDesc: flashAttnTensorDescriptor_t,
        kDesc: flashAttnTensorDescriptor_t,
        vDesc: flashAttnTensorDescriptor_t,
        oDesc: flashAttnTensorDescriptor_t,
        description: *mut c_char,
        descriptionLen: usize,
        deterministic: *mut i32,
    ) -> flashAttnStatus_t;

    pub fn flashAttnForwardGetWorkspaceSize(
        handle: flashAttnHandle_t,
        attnDesc: flashAttnAttentionDescriptor_t,
        seqDesc: flashAttnSeqDescriptor_t,
        qDesc: flashAttnTensorDescriptor_t,
        kDesc: flashAttnTensorDescriptor_t,
        vDesc: flashAttnTensorDescriptor_t,
        oDesc: flashAttnTensorDescriptor_t,
        lseDesc: flashAttnTensorDescriptor_t,
        bytes: *mut usize,
    ) -> flashAttnStatus_t;
    pub fn flashAttnForward(
        handle: flashAttnHandle_t,
        attnDesc: flashAttnAttentionDescriptor_t,
        seqDesc: flashAttnSeqDescriptor_t,
        qDesc: flashAttnTensorDescriptor_t,
        q: *const c_void,
        kDesc: flashAttnTensorDescriptor_t,
        k: *const c_void,
        vDesc: flashAttnTensorDescriptor_t,
        v: *const c_void,
        oDesc: flashAttnTensorDescriptor_t,
        o: *mut c_void,
        lseDesc: flashAttnTensorDescriptor_t,
        lse: *mut f32,
        workspace: *mut c_void,
        workspaceBytes: usize,
    ) -> flashAttnStatus_t;

    pub fn flashAttnBackwardGetWorkspaceSize(
        handle: flashAttnHandle_t,
        attnDesc: flashAttnAttentionDescriptor_t,
        seqDesc: flashAttnSeqDescriptor_t,
        qDesc: flashAttnTensorDescriptor_t,
        kDesc: flashAttnTensorDescriptor_t,
        vDesc: flashAttnTensorDescriptor_t,
        oDesc: flashAttnTensorDescriptor_t,
        lseDesc: flashAttnTensorDescriptor_t,
        bytes: *mut usize,
    ) -> flashAttnStatus_t;
    pub fn flashAttnBackwardGetWorkspaceSizeWithGradients(
        handle: flashAttnHandle_t,
        attnDesc: flashAttnAttentionDescriptor_t,
        seqDesc: flashAttnSeqDescriptor_t,
        qDesc: flashAttnTensorDescriptor_t,
        kDesc: flashAttnTensorDescriptor_t,
        vDesc: flashAttnTensorDescriptor_t,
        oDesc: flashAttnTensorDescriptor_t,
        dODesc: flashAttnTensorDescriptor_t,
        lseDesc: flashAttnTensorDescriptor_t,
        dQDesc: flashAttnTensorDescriptor_t,
        dKDesc: flashAttnTensorDescriptor_t,
        dVDesc: flashAttnTensorDescriptor_t,
        bytes: *mut usize,
    ) -> flashAttnStatus_t;
    pub fn flashAttnBackward(
        handle: flashAttnHandle_t,
        attnDesc: flashAttnAttentionDescriptor_t,
        seqDesc: flashAttnSeqDescriptor_t,
        qDesc: flashAttnTensorDescriptor_t,
        q: *const c_void,
        kDesc: flashAttnTensorDescriptor_t,
        k: *const c_void,
        vDesc: flashAttnTensorDescriptor_t,
        v: *const c_void,
        oDesc: flashAttnTensorDescriptor_t,
        o: *const c_void,
        dODesc: flashAttnTensorDescriptor_t,
        dO: *const c_void,
        lseDesc: flashAttnTensorDescriptor_t,
        lse: *const f32,
        dQDesc: flashAttnTensorDescriptor_t,
        dQ: *mut c_void,
        dKDesc: flashAttnTensorDescriptor_t,
        dK: *mut c_void,
        dVDesc: flashAttnTensorDescriptor_t,
        dV: *mut c_void,
        workspace: *mut c_void,
        workspaceBytes: usize,
    ) -> flashAttnStatus_t;

    pub fn flashAttnDecodeChunkGetWorkspaceSize(
        handle: flashAttnHandle_t,
        attnDesc: flashAttnAttentionDescriptor_t,
        seqDesc: flashAttnSeqDescriptor_t,
        qDesc: flashAttnTensorDescriptor_t,
        kDesc: flashAttnTensorDescriptor_t,
        vDesc: flashAttnTensorDescriptor_t,
        oDesc: flashAttnTensorDescriptor_t,
        lseDesc: flashAttnTensorDescriptor_t,
        numChunks: i32,
        bytes: *mut usize,
    ) -> flashAttnStatus_t;
    pub fn flashAttnDecodeChunk(
        handle: flashAttnHandle_t,
        attnDesc: flashAttnAttentionDescriptor_t,
        seqDesc: flashAttnSeqDescriptor_t,
        qDesc: flashAttnTensorDescriptor_t,
        q: *const c_void,
        kDesc: flashAttnTensorDescriptor_t,
        k: *const c_void,
        vDesc: flashAttnTensorDescriptor_t,
        v: *const c_void,
        oDesc: flashAttnTensorDescriptor_t,
        o: *mut c_void,
        lseDesc: flashAttnTensorDescriptor_t,
        lse: *mut f32,
        numChunks: i32,
        workspace: *mut c_void,
        workspaceBytes: usize,
    ) -> flashAttnStatus_t;

    pub fn flashAttnMergeStatesGetWorkspaceSize(
        handle: flashAttnHandle_t,
        partialODesc: flashAttnTensorDescriptor_t,
        partialLseDesc: flashAttnTensorDescriptor_t,
        oDesc: flashAttnTensorDescriptor_t,
        lseDesc: flashAttnTensorDescriptor_t,
        bytes: *mut usize,
    ) -> flashAttnStatus_t;
    pub fn flashAttnMergeStates(
        handle: flashAttnHandle_t,
        partialODesc: flashAttnTensorDescriptor_t,
        partialO: *const f32,
        partialLseDesc: flashAttnTensorDescriptor_t,
        partialLse: *const f32,
        oDesc: flashAttnTensorDescriptor_t,
        o: *mut c_void,
        lseDesc: flashAttnTensorDescriptor_t,
        lse: *mut f32,
        workspace: *mut c_void,
        workspaceBytes: usize,
    ) -> flashAttnStatus_t;
}
