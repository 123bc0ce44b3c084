// Package flashattn is the Go binding of libflashattn: FlashAttention forward, backward, split-KV decode and the
// merge of partial states behind the library's C ABI (<flashattn/flashattn.h>, linked through pkg-config).
//
// Handles and descriptors own their library objects: Close releases them, and a finalizer does it for objects that
// become unreachable unclosed. Errors are values: every failing call returns an *Error carrying the library's Status
// and its message (which names the argument and the values), or, for what this package refuses before calling the
// library, StatusBadParam and a message naming the argument.
//
// HOST operations take Go slices ([]float32 for FP32 tensors, []uint16 holding FP16/BF16 bits), checked against
// their descriptors' spans before the call. CUDA operations take device pointers as uintptr; nothing can check
// those from the host, so the caller vouches for them.
package flashattn

/*
#cgo pkg-config: flashattn
#include <flashattn/flashattn.h>
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Status is a library status code.
type Status int32

const (
	StatusSuccess               Status = C.FLASHATTN_STATUS_SUCCESS
	StatusNotInitialized        Status = C.FLASHATTN_STATUS_NOT_INITIALIZED
	StatusBadParam              Status = C.FLASHATTN_STATUS_BAD_PARAM
	StatusNotSupported          Status = C.FLASHATTN_STATUS_NOT_SUPPORTED
	StatusInsufficientWorkspace Status = C.FLASHATTN_STATUS_INSUFFICIENT_WORKSPACE
	StatusAllocFailed           Status = C.FLASHATTN_STATUS_ALLOC_FAILED
	StatusArchMismatch          Status = C.FLASHATTN_STATUS_ARCH_MISMATCH
	StatusNoDevice              Status = C.FLASHATTN_STATUS_NO_DEVICE
	StatusExecutionFailed       Status = C.FLASHATTN_STATUS_EXECUTION_FAILED
	StatusInternalError         Status = C.FLASHATTN_STATUS_INTERNAL_ERROR
)

// String is the library's name of the status ("FLASHATTN_STATUS_BAD_PARAM"), also for values it does not know.
func (s Status) String() string {
	return C.GoString(C.flashAttnGetErrorString(C.flashAttnStatus_t(s)))
}

// Backend says where a handle runs its operations.
type Backend int32

const (
	BackendAuto Backend = C.FLASHATTN_BACKEND_AUTO
	BackendCUDA Backend = C.FLASHATTN_BACKEND_CUDA
	BackendHost Backend = C.FLASHATTN_BACKEND_HOST
)

func (b Backend) String() string {
	switch b {
	case BackendAuto:
		return "AUTO"
	case BackendCUDA:
		return "CUDA"
	case BackendHost:
		return "HOST"
	}
	return fmt.Sprintf("Backend(%d)", int32(b))
}

// DataType is the storage type of a tensor.
type DataType int32

const (
	DataFP16 DataType = C.FLASHATTN_DATA_FP16
	DataBF16 DataType = C.FLASHATTN_DATA_BF16
	DataFP32 DataType = C.FLASHATTN_DATA_FP32
)

func (d DataType) String() string {
	switch d {
	case DataFP16:
		return "FP16"
	case DataBF16:
		return "BF16"
	case DataFP32:
		return "FP32"
	}
	return fmt.Sprintf("DataType(%d)", int32(d))
}

// MaskMode is the causal masking mode.
type MaskMode int32

const (
	MaskNone              MaskMode = C.FLASHATTN_MASK_NONE
	MaskCausalTopLeft     MaskMode = C.FLASHATTN_MASK_CAUSAL_TOP_LEFT
	MaskCausalBottomRight MaskMode = C.FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT
)

// Operation names an operation in CheckSupport.
type Operation int32

const (
	OpForward     Operation = C.FLASHATTN_OP_FORWARD
	OpBackward    Operation = C.FLASHATTN_OP_BACKWARD
	OpDecodeChunk Operation = C.FLASHATTN_OP_DECODE_CHUNK
	OpMergeStates Operation = C.FLASHATTN_OP_MERGE_STATES
)

// MaxTensorRank is the largest rank a tensor descriptor holds.
const MaxTensorRank = C.FLASHATTN_MAX_TENSOR_RANK

// enumValues maps the header's enumerator names to this package's constants; the tests compare it with the API
// spec, so a value added to the header without a Go constant fails there.
var enumValues = map[string]int64{
	"FLASHATTN_STATUS_SUCCESS":                int64(StatusSuccess),
	"FLASHATTN_STATUS_NOT_INITIALIZED":        int64(StatusNotInitialized),
	"FLASHATTN_STATUS_BAD_PARAM":              int64(StatusBadParam),
	"FLASHATTN_STATUS_NOT_SUPPORTED":          int64(StatusNotSupported),
	"FLASHATTN_STATUS_INSUFFICIENT_WORKSPACE": int64(StatusInsufficientWorkspace),
	"FLASHATTN_STATUS_ALLOC_FAILED":           int64(StatusAllocFailed),
	"FLASHATTN_STATUS_ARCH_MISMATCH":          int64(StatusArchMismatch),
	"FLASHATTN_STATUS_NO_DEVICE":              int64(StatusNoDevice),
	"FLASHATTN_STATUS_EXECUTION_FAILED":       int64(StatusExecutionFailed),
	"FLASHATTN_STATUS_INTERNAL_ERROR":         int64(StatusInternalError),
	"FLASHATTN_BACKEND_AUTO":                  int64(BackendAuto),
	"FLASHATTN_BACKEND_CUDA":                  int64(BackendCUDA),
	"FLASHATTN_BACKEND_HOST":                  int64(BackendHost),
	"FLASHATTN_DATA_FP16":                     int64(DataFP16),
	"FLASHATTN_DATA_BF16":                     int64(DataBF16),
	"FLASHATTN_DATA_FP32":                     int64(DataFP32),
	"FLASHATTN_MASK_NONE":                     int64(MaskNone),
	"FLASHATTN_MASK_CAUSAL_TOP_LEFT":          int64(MaskCausalTopLeft),
	"FLASHATTN_MASK_CAUSAL_BOTTOM_RIGHT":      int64(MaskCausalBottomRight),
	"FLASHATTN_OP_FORWARD":                    int64(OpForward),
	"FLASHATTN_OP_BACKWARD":                   int64(OpBackward),
	"FLASHATTN_OP_DECODE_CHUNK":               int64(OpDecodeChunk),
	"FLASHATTN_OP_MERGE_STATES":               int64(OpMergeStates),
	"FLASHATTN_MAX_TENSOR_RANK":               int64(MaxTensorRank),
}

// Error is a failed call: the status and the message naming what was wrong. FromLibrary is false when this package
// refused the call before making it.
type Error struct {
	Status      Status
	Message     string
	FromLibrary bool
}

func (e *Error) Error() string {
	return e.Status.String() + ": " + e.Message
}

func refused(format string, args ...interface{}) error {
	return &Error{Status: StatusBadParam, Message: fmt.Sprintf(format, args...)}
}

// call runs one library call and turns a failure into an *Error. The library's message is per OS thread and the Go
// scheduler may move a goroutine to another thread between two cgo calls, so the goroutine stays locked to its
// thread from the call until the message has been read.
func call(f func() C.flashAttnStatus_t) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if s := f(); s != C.FLASHATTN_STATUS_SUCCESS {
		return &Error{Status: Status(s), Message: lastErrorMessage(), FromLibrary: true}
	}
	return nil
}

// lastErrorMessage is the calling thread's last library message (see call).
func lastErrorMessage() string {
	n := C.flashAttnGetLastErrorMessage(nil, 0)
	buf := make([]byte, int(n)+1)
	C.flashAttnGetLastErrorMessage((*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
	return string(buf[:n])
}

// Version is the loaded library's version, MAJOR*10000 + MINOR*100 + PATCH.
func Version() int32 {
	return int32(C.flashAttnGetVersion())
}
