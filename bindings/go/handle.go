package flashattn

/*
#cgo pkg-config: flashattn
#include <flashattn/flashattn.h>
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// Handle is a library handle: backend, device, stream. It serves one goroutine at a time. HOST operations use a
// workspace the handle owns and grows as needed.
type Handle struct {
	raw       C.flashAttnHandle_t
	backend   Backend
	workspace []byte
}

// NewHandle makes a handle on the AUTO backend: CUDA when a usable GPU is present, else HOST.
func NewHandle() (*Handle, error) {
	h := &Handle{}
	if err := call(func() C.flashAttnStatus_t { return C.flashAttnCreate(&h.raw) }); err != nil {
		return nil, err
	}
	return h.adopt()
}

// NewHandleWithBackend makes a handle on a chosen backend.
func NewHandleWithBackend(backend Backend) (*Handle, error) {
	h := &Handle{}
	err := call(func() C.flashAttnStatus_t {
		return C.flashAttnCreateWithBackend(&h.raw, C.flashAttnBackend_t(backend))
	})
	if err != nil {
		return nil, err
	}
	return h.adopt()
}

func (h *Handle) adopt() (*Handle, error) {
	runtime.SetFinalizer(h, (*Handle).Close)
	var b C.flashAttnBackend_t
	if err := call(func() C.flashAttnStatus_t { return C.flashAttnGetBackend(h.raw, &b) }); err != nil {
		h.Close()
		return nil, err
	}
	h.backend = Backend(b)
	return h, nil
}

// Close destroys the handle (work queued on its stream is not waited for); later calls do nothing.
func (h *Handle) Close() error {
	if h.raw == nil {
		return nil
	}
	err := call(func() C.flashAttnStatus_t { return C.flashAttnDestroy(h.raw) })
	h.raw = nil
	h.workspace = nil
	runtime.SetFinalizer(h, nil)
	return err
}

// Backend is CUDA or HOST (never AUTO).
func (h *Handle) Backend() Backend { return h.backend }

// SetStream binds a CUDA stream (a cudaStream_t as uintptr; 0 is the default stream). HOST ignores it.
func (h *Handle) SetStream(stream uintptr) error {
	defer runtime.KeepAlive(h)
	return call(func() C.flashAttnStatus_t {
		return C.flashAttnSetStream(h.raw, (*C.struct_CUstream_st)(devPtr(stream)))
	})
}

// Stream returns the bound stream (0 for the default stream).
func (h *Handle) Stream() (uintptr, error) {
	defer runtime.KeepAlive(h)
	var s *C.struct_CUstream_st
	err := call(func() C.flashAttnStatus_t { return C.flashAttnGetStream(h.raw, &s) })
	return uintptr(unsafe.Pointer(s)), err
}

// HostTensor is a descriptor and the Go slice holding its data, for HOST operations. Make one with F32 or U16.
type HostTensor struct {
	Desc  *TensorDescriptor
	ptr   unsafe.Pointer
	n     int
	isF32 bool
}

// F32 pairs an FP32 descriptor with its data.
func F32(desc *TensorDescriptor, data []float32) HostTensor {
	t := HostTensor{Desc: desc, n: len(data), isF32: true}
	if len(data) > 0 {
		t.ptr = unsafe.Pointer(&data[0])
	}
	return t
}

// U16 pairs an FP16 or BF16 descriptor with its data, the raw 16-bit patterns.
func U16(desc *TensorDescriptor, data []uint16) HostTensor {
	t := HostTensor{Desc: desc, n: len(data)}
	if len(data) > 0 {
		t.ptr = unsafe.Pointer(&data[0])
	}
	return t
}

// DeviceTensor is a descriptor and a pointer in the handle's memory (device memory for CUDA). The caller
// guarantees that the pointer addresses the descriptor's span, suitably aligned, until the stream has run the
// operation.
type DeviceTensor struct {
	Desc *TensorDescriptor
	Ptr  uintptr
}

// check refuses a slice whose element type or length does not fit its descriptor.
func (t HostTensor) check(name string, mustBeF32 bool) error {
	if t.Desc == nil {
		return refused("%s: no descriptor", name)
	}
	if t.Desc.raw == nil {
		return refused("%s: the descriptor is closed", name)
	}
	dt := t.Desc.DataType()
	if mustBeF32 && !t.isF32 {
		return refused("%s: must be FP32 data ([]float32)", name)
	}
	if t.isF32 && dt != DataFP32 {
		return refused("%s: the descriptor's data type is %v, the slice holds float32", name, dt)
	}
	if !t.isF32 && dt != DataFP16 && dt != DataBF16 {
		return refused("%s: the descriptor's data type is %v, the slice holds uint16 (FP16/BF16 bits)", name, dt)
	}
	span, ok := t.Desc.Span()
	if !ok {
		return refused("%s: the descriptor spans more elements than an int counts", name)
	}
	if t.n < span {
		return refused("%s: the slice has %d elements, its descriptor (dims %v, strides %v) spans %d", name, t.n,
			t.Desc.dims, t.Desc.strides, span)
	}
	return nil
}

func (h *Handle) requireHost(what string) error {
	if h.raw == nil {
		return refused("%s: the handle is closed", what)
	}
	if h.backend != BackendHost {
		return refused("%s: the handle runs on %v; slices are host memory, so use a HOST handle, or the Device "+
			"operation with device pointers", what, h.backend)
	}
	return nil
}

// checkHostDescriptors refuses device arrays and too few ALiBi slopes or sinks for a HOST operation.
func checkHostDescriptors(attn *AttentionDescriptor, seq *SeqDescriptor, q *TensorDescriptor) error {
	if seq != nil && seq.device {
		return refused("seq: the sequence descriptor holds device arrays; a HOST operation needs host arrays")
	}
	if attn == nil {
		return nil
	}
	if attn.sinksDevice {
		return refused("attn: the sinks are in device memory; a HOST operation needs host sinks")
	}
	// Q is [batch, heads, seq, dim] or [tokens, heads, dim]: the heads are dims[1] either way.
	if heads := headsOf(q); attn.sinks != nil && attn.sinkCount < heads {
		return refused("sinks: %d sinks, the operation reads %d (heads)", attn.sinkCount, heads)
	}
	if attn.slopesDevice {
		return refused("attn: the ALiBi slopes are in device memory; a HOST operation needs host slopes")
	}
	if attn.slopes == nil || len(q.dims) < 2 {
		return nil
	}
	// Q is [batch, heads, seq, dim], or [tokens, heads, dim] with the batch in the ragged descriptor.
	heads, batch := int(q.dims[1]), int(q.dims[0])
	if len(q.dims) == 3 && seq != nil && seq.raggedBatch > 0 {
		batch = seq.raggedBatch
	}
	need, what := heads, "heads"
	if attn.perBatch {
		need, what = batch*heads, "batch x heads"
	}
	if attn.slopeCount < need {
		return refused("alibi slopes: %d slopes, the operation reads %d (%s)", attn.slopeCount, need, what)
	}
	return nil
}

func headsOf(q *TensorDescriptor) int {
	if len(q.dims) < 2 {
		return 0
	}
	return int(q.dims[1])
}

// checkHostSinksGradient refuses a dSinks that a HOST backward cannot write: device memory, or fewer floats than
// heads.
func checkHostSinksGradient(attn *AttentionDescriptor, q *TensorDescriptor) error {
	if attn == nil {
		return nil
	}
	if attn.dSinksDevice {
		return refused("attn: the sinks gradient is in device memory; a HOST backward needs EnableSinksGradient")
	}
	if heads := headsOf(q); attn.dSinks != nil && attn.dSinkCount < heads {
		return refused("dSinks: EnableSinksGradient(%d), the backward writes %d (heads)", attn.dSinkCount, heads)
	}
	return nil
}

// hostWorkspace returns a 256-byte aligned pointer to at least n bytes of the handle's workspace (nil for 0).
func (h *Handle) hostWorkspace(n int) unsafe.Pointer {
	if n == 0 {
		return nil
	}
	const align = 256
	if len(h.workspace) < n+align {
		h.workspace = make([]byte, n+align)
	}
	base := uintptr(unsafe.Pointer(&h.workspace[0]))
	return unsafe.Pointer(&h.workspace[(align-base%align)%align])
}

// Support is what CheckSupport reports for a configuration that runs.
type Support struct {
	Description   string // kernel family, tile, accumulator precision and determinism, in the library's words
	Deterministic bool   // repeated runs give bitwise identical results
}

// CheckSupport says, without running anything, whether a configuration runs on this handle and what serves it.
// For OpMergeStates, q is the partial O descriptor and k, v are nil. An unsupported configuration is an *Error with
// StatusNotSupported and the reason.
func (h *Handle) CheckSupport(op Operation, attn *AttentionDescriptor, seq *SeqDescriptor,
	q, k, v, o *TensorDescriptor) (Support, error) {
	defer runtime.KeepAlive([]interface{}{h, attn, seq, q, k, v, o})
	text := make([]byte, 512)
	var det C.int32_t
	err := call(func() C.flashAttnStatus_t {
		return C.flashAttnCheckSupport(h.raw, C.flashAttnOperation_t(op), rawAttn(attn), rawSeq(seq), rawTensor(q),
			rawTensor(k), rawTensor(v), rawTensor(o), (*C.char)(unsafe.Pointer(&text[0])), C.size_t(len(text)), &det)
	})
	if err != nil {
		return Support{}, err
	}
	return Support{Description: C.GoString((*C.char)(unsafe.Pointer(&text[0]))), Deterministic: det != 0}, nil
}

// ForwardWorkspaceSize is the workspace Forward needs for these descriptors (lse may be nil).
func (h *Handle) ForwardWorkspaceSize(attn *AttentionDescriptor, seq *SeqDescriptor,
	q, k, v, o, lse *TensorDescriptor) (int, error) {
	defer runtime.KeepAlive([]interface{}{h, attn, seq, q, k, v, o, lse})
	var n C.size_t
	err := call(func() C.flashAttnStatus_t {
		return C.flashAttnForwardGetWorkspaceSize(h.raw, rawAttn(attn), rawSeq(seq), rawTensor(q), rawTensor(k),
			rawTensor(v), rawTensor(o), rawTensor(lse), &n)
	})
	return int(n), err
}

// BackwardWorkspaceSize is the workspace Backward needs for these descriptors.
func (h *Handle) BackwardWorkspaceSize(attn *AttentionDescriptor, seq *SeqDescriptor,
	q, k, v, o, lse *TensorDescriptor) (int, error) {
	defer runtime.KeepAlive([]interface{}{h, attn, seq, q, k, v, o, lse})
	var n C.size_t
	err := call(func() C.flashAttnStatus_t {
		return C.flashAttnBackwardGetWorkspaceSize(h.raw, rawAttn(attn), rawSeq(seq), rawTensor(q), rawTensor(k),
			rawTensor(v), rawTensor(o), rawTensor(lse), &n)
	})
	return int(n), err
}

// BackwardWorkspaceSizeWithGradients is the exact workspace Backward needs when the gradients have strides of their
// own (BackwardWorkspaceSize sizes them in the strides of O, Q, K and V).
func (h *Handle) BackwardWorkspaceSizeWithGradients(attn *AttentionDescriptor, seq *SeqDescriptor,
	q, k, v, o, dO, lse, dQ, dK, dV *TensorDescriptor) (int, error) {
	defer runtime.KeepAlive([]interface{}{h, attn, seq, q, k, v, o, dO, lse, dQ, dK, dV})
	var n C.size_t
	err := call(func() C.flashAttnStatus_t {
		return C.flashAttnBackwardGetWorkspaceSizeWithGradients(h.raw, rawAttn(attn), rawSeq(seq), rawTensor(q),
			rawTensor(k), rawTensor(v), rawTensor(o), rawTensor(dO), rawTensor(lse), rawTensor(dQ), rawTensor(dK),
			rawTensor(dV), &n)
	})
	return int(n), err
}

// DecodeChunkWorkspaceSize is the workspace DecodeChunk needs for these descriptors and chunk count.
func (h *Handle) DecodeChunkWorkspaceSize(attn *AttentionDescriptor, seq *SeqDescriptor,
	q, k, v, o, lse *TensorDescriptor, numChunks int32) (int, error) {
	defer runtime.KeepAlive([]interface{}{h, attn, seq, q, k, v, o, lse})
	var n C.size_t
	err := call(func() C.flashAttnStatus_t {
		return C.flashAttnDecodeChunkGetWorkspaceSize(h.raw, rawAttn(attn), rawSeq(seq), rawTensor(q), rawTensor(k),
			rawTensor(v), rawTensor(o), rawTensor(lse), C.int32_t(numChunks), &n)
	})
	return int(n), err
}

// MergeStatesWorkspaceSize is the workspace MergeStates needs for these descriptors.
func (h *Handle) MergeStatesWorkspaceSize(partialO, partialLse, o, lse *TensorDescriptor) (int, error) {
	defer runtime.KeepAlive([]interface{}{h, partialO, partialLse, o, lse})
	var n C.size_t
	err := call(func() C.flashAttnStatus_t {
		return C.flashAttnMergeStatesGetWorkspaceSize(h.raw, rawTensor(partialO), rawTensor(partialLse),
			rawTensor(o), rawTensor(lse), &n)
	})
	return int(n), err
}

func optDesc(t *HostTensor) *TensorDescriptor {
	if t == nil {
		return nil
	}
	return t.Desc
}

func optPtr(t *HostTensor) unsafe.Pointer {
	if t == nil {
		return nil
	}
	return t.ptr
}

// Forward computes O = softmax(mask(softcap(scale Q K^T) + alibi)) V, and LSE when lse is not nil, on the HOST
// backend; with sinks in attn, each row's softmax denominator also holds exp(sink of its head).
func (h *Handle) Forward(attn *AttentionDescriptor, seq *SeqDescriptor, q, k, v, o HostTensor, lse *HostTensor) error {
	if err := h.requireHost("Forward"); err != nil {
		return err
	}
	for _, c := range []struct {
		name string
		t    HostTensor
	}{{"q", q}, {"k", k}, {"v", v}, {"o", o}} {
		if err := c.t.check(c.name, false); err != nil {
			return err
		}
	}
	if lse != nil {
		if err := lse.check("lse", true); err != nil {
			return err
		}
	}
	if err := checkHostDescriptors(attn, seq, q.Desc); err != nil {
		return err
	}
	n, err := h.ForwardWorkspaceSize(attn, seq, q.Desc, k.Desc, v.Desc, o.Desc, optDesc(lse))
	if err != nil {
		return err
	}
	ws := h.hostWorkspace(n)
	defer runtime.KeepAlive([]interface{}{h, attn, seq, q, k, v, o, lse})
	return call(func() C.flashAttnStatus_t {
		return C.flashAttnForward(h.raw, rawAttn(attn), rawSeq(seq), q.Desc.raw, q.ptr, k.Desc.raw, k.ptr, v.Desc.raw,
			v.ptr, o.Desc.raw, o.ptr, rawTensor(optDesc(lse)), (*C.float)(optPtr(lse)), ws, C.size_t(n))
	})
}

// Backward computes dQ, dK, dV of Forward given dO and the forward's O and LSE, on the HOST backend; attn must hold
// the forward's sinks, and with EnableSinksGradient it also writes their gradient (read it with SinksGradient).
func (h *Handle) Backward(attn *AttentionDescriptor, seq *SeqDescriptor,
	q, k, v, o, dO, lse, dQ, dK, dV HostTensor) error {
	if err := h.requireHost("Backward"); err != nil {
		return err
	}
	for _, c := range []struct {
		name string
		t    HostTensor
	}{{"q", q}, {"k", k}, {"v", v}, {"o", o}, {"dO", dO}, {"dQ", dQ}, {"dK", dK}, {"dV", dV}} {
		if err := c.t.check(c.name, false); err != nil {
			return err
		}
	}
	if err := lse.check("lse", true); err != nil {
		return err
	}
	if err := checkHostDescriptors(attn, seq, q.Desc); err != nil {
		return err
	}
	if err := checkHostSinksGradient(attn, q.Desc); err != nil {
		return err
	}
	n, err := h.BackwardWorkspaceSizeWithGradients(attn, seq, q.Desc, k.Desc, v.Desc, o.Desc, dO.Desc, lse.Desc,
		dQ.Desc, dK.Desc, dV.Desc)
	if err != nil {
		return err
	}
	ws := h.hostWorkspace(n)
	defer runtime.KeepAlive([]interface{}{h, attn, seq, q, k, v, o, dO, lse, dQ, dK, dV})
	return call(func() C.flashAttnStatus_t {
		return C.flashAttnBackward(h.raw, rawAttn(attn), rawSeq(seq), q.Desc.raw, q.ptr, k.Desc.raw, k.ptr,
			v.Desc.raw, v.ptr, o.Desc.raw, o.ptr, dO.Desc.raw, dO.ptr, lse.Desc.raw, (*C.float)(lse.ptr), dQ.Desc.raw,
			dQ.ptr, dK.Desc.raw, dK.ptr, dV.Desc.raw, dV.ptr, ws, C.size_t(n))
	})
}

// DecodeChunk runs split-KV decode against a dense or paged KV cache on the HOST backend; numChunks 0 chooses. Sinks
// in attn join each row once, whatever the chunk count, so the result is Forward's.
func (h *Handle) DecodeChunk(attn *AttentionDescriptor, seq *SeqDescriptor, q, k, v, o HostTensor, lse *HostTensor,
	numChunks int32) error {
	if err := h.requireHost("DecodeChunk"); err != nil {
		return err
	}
	for _, c := range []struct {
		name string
		t    HostTensor
	}{{"q", q}, {"k", k}, {"v", v}, {"o", o}} {
		if err := c.t.check(c.name, false); err != nil {
			return err
		}
	}
	if lse != nil {
		if err := lse.check("lse", true); err != nil {
			return err
		}
	}
	if err := checkHostDescriptors(attn, seq, q.Desc); err != nil {
		return err
	}
	n, err := h.DecodeChunkWorkspaceSize(attn, seq, q.Desc, k.Desc, v.Desc, o.Desc, optDesc(lse), numChunks)
	if err != nil {
		return err
	}
	ws := h.hostWorkspace(n)
	defer runtime.KeepAlive([]interface{}{h, attn, seq, q, k, v, o, lse})
	return call(func() C.flashAttnStatus_t {
		return C.flashAttnDecodeChunk(h.raw, rawAttn(attn), rawSeq(seq), q.Desc.raw, q.ptr, k.Desc.raw, k.ptr,
			v.Desc.raw, v.ptr, o.Desc.raw, o.ptr, rawTensor(optDesc(lse)), (*C.float)(optPtr(lse)),
			C.int32_t(numChunks), ws, C.size_t(n))
	})
}

// MergeStates merges partial attention states (FP32) into O, and LSE when lse is not nil, on the HOST backend.
func (h *Handle) MergeStates(partialO, partialLse, o HostTensor, lse *HostTensor) error {
	if err := h.requireHost("MergeStates"); err != nil {
		return err
	}
	if err := partialO.check("partialO", true); err != nil {
		return err
	}
	if err := partialLse.check("partialLse", true); err != nil {
		return err
	}
	if err := o.check("o", false); err != nil {
		return err
	}
	if lse != nil {
		if err := lse.check("lse", true); err != nil {
			return err
		}
	}
	n, err := h.MergeStatesWorkspaceSize(partialO.Desc, partialLse.Desc, o.Desc, optDesc(lse))
	if err != nil {
		return err
	}
	ws := h.hostWorkspace(n)
	defer runtime.KeepAlive([]interface{}{h, partialO, partialLse, o, lse})
	return call(func() C.flashAttnStatus_t {
		return C.flashAttnMergeStates(h.raw, partialO.Desc.raw, (*C.float)(partialO.ptr), partialLse.Desc.raw,
			(*C.float)(partialLse.ptr), o.Desc.raw, o.ptr, rawTensor(optDesc(lse)), (*C.float)(optPtr(lse)), ws,
			C.size_t(n))
	})
}

func optDevDesc(t *DeviceTensor) C.flashAttnTensorDescriptor_t {
	if t == nil {
		return nil
	}
	return rawTensor(t.Desc)
}

// devPtr reinterprets a device address (or a caller-owned host one), never Go memory, as a pointer for cgo. The
// bits are copied rather than converted: a uintptr-to-pointer conversion is what go vet flags, rightly for Go memory.
func devPtr(p uintptr) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&p))
}

func optDevPtr(t *DeviceTensor) *C.float {
	if t == nil {
		return nil
	}
	return (*C.float)(devPtr(t.Ptr))
}

// ForwardDevice is Forward on pointers in the handle's memory (device memory for CUDA), queued on its stream. The
// workspace holds workspaceBytes (at least ForwardWorkspaceSize), 256-byte aligned. Nothing here can check device
// memory: the caller guarantees every pointer, and that everything outlives the stream's run of the operation.
func (h *Handle) ForwardDevice(attn *AttentionDescriptor, seq *SeqDescriptor, q, k, v, o DeviceTensor,
	lse *DeviceTensor, workspace uintptr, workspaceBytes int) error {
	defer runtime.KeepAlive([]interface{}{h, attn, seq, q, k, v, o, lse})
	return call(func() C.flashAttnStatus_t {
		return C.flashAttnForward(h.raw, rawAttn(attn), rawSeq(seq), rawTensor(q.Desc), devPtr(q.Ptr),
			rawTensor(k.Desc), devPtr(k.Ptr), rawTensor(v.Desc), devPtr(v.Ptr), rawTensor(o.Desc), devPtr(o.Ptr),
			optDevDesc(lse), optDevPtr(lse), devPtr(workspace), C.size_t(workspaceBytes))
	})
}

// BackwardDevice is Backward on pointers in the handle's memory; see ForwardDevice.
func (h *Handle) BackwardDevice(attn *AttentionDescriptor, seq *SeqDescriptor, q, k, v, o, dO, lse, dQ, dK, dV DeviceTensor,
	workspace uintptr, workspaceBytes int) error {
	defer runtime.KeepAlive([]interface{}{h, attn, seq, q, k, v, o, dO, lse, dQ, dK, dV})
	return call(func() C.flashAttnStatus_t {
		return C.flashAttnBackward(h.raw, rawAttn(attn), rawSeq(seq), rawTensor(q.Desc), devPtr(q.Ptr),
			rawTensor(k.Desc), devPtr(k.Ptr), rawTensor(v.Desc), devPtr(v.Ptr), rawTensor(o.Desc), devPtr(o.Ptr),
			rawTensor(dO.Desc), devPtr(dO.Ptr), rawTensor(lse.Desc), (*C.float)(devPtr(lse.Ptr)), rawTensor(dQ.Desc),
			devPtr(dQ.Ptr), rawTensor(dK.Desc), devPtr(dK.Ptr), rawTensor(dV.Desc), devPtr(dV.Ptr), devPtr(workspace),
			C.size_t(workspaceBytes))
	})
}

// DecodeChunkDevice is DecodeChunk on pointers in the handle's memory; see ForwardDevice.
func (h *Handle) DecodeChunkDevice(attn *AttentionDescriptor, seq *SeqDescriptor, q, k, v, o DeviceTensor,
	lse *DeviceTensor, numChunks int32, workspace uintptr, workspaceBytes int) error {
	defer runtime.KeepAlive([]interface{}{h, attn, seq, q, k, v, o, lse})
	return call(func() C.flashAttnStatus_t {
		return C.flashAttnDecodeChunk(h.raw, rawAttn(attn), rawSeq(seq), rawTensor(q.Desc), devPtr(q.Ptr),
			rawTensor(k.Desc), devPtr(k.Ptr), rawTensor(v.Desc), devPtr(v.Ptr), rawTensor(o.Desc), devPtr(o.Ptr),
			optDevDesc(lse), optDevPtr(lse), C.int32_t(numChunks), devPtr(workspace), C.size_t(workspaceBytes))
	})
}

// MergeStatesDevice is MergeStates on pointers in the handle's memory; see ForwardDevice.
func (h *Handle) MergeStatesDevice(partialO, partialLse, o DeviceTensor, lse *DeviceTensor, workspace uintptr,
	workspaceBytes int) error {
	defer runtime.KeepAlive([]interface{}{h, partialO, partialLse, o, lse})
	return call(func() C.flashAttnStatus_t {
		return C.flashAttnMergeStates(h.raw, rawTensor(partialO.Desc), (*C.float)(devPtr(partialO.Ptr)),
			rawTensor(partialLse.Desc), (*C.float)(devPtr(partialLse.Ptr)), rawTensor(o.Desc), devPtr(o.Ptr),
			optDevDesc(lse), optDevPtr(lse), devPtr(workspace), C.size_t(workspaceBytes))
	})
}
