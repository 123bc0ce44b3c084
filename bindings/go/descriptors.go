package flashattn

/*
#cgo pkg-config: flashattn
#include <stdlib.h>
#include <flashattn/flashattn.h>
*/
import "C"

import (
	"math/big"
	"runtime"
	"unsafe"
)

// TensorDescriptor holds the data type, dimensions and strides (in elements) of one tensor. It is immutable once
// made, so it may be shared between goroutines and operations.
type TensorDescriptor struct {
	raw      C.flashAttnTensorDescriptor_t
	dataType DataType
	dims     []int64
	strides  []int64
}

// NewTensorDescriptor makes a descriptor with explicit strides. The library validates everything (rank 1..8,
// dims >= 1, strides >= 0, the last stride 1) and its message says what is wrong.
func NewTensorDescriptor(dataType DataType, dims, strides []int64) (*TensorDescriptor, error) {
	if len(dims) != len(strides) {
		return nil, refused("strides: %d strides for %d dimensions", len(strides), len(dims))
	}
	if len(dims) == 0 {
		return nil, refused("dims: no dimensions")
	}
	d := &TensorDescriptor{dataType: dataType, dims: append([]int64(nil), dims...),
		strides: append([]int64(nil), strides...)}
	if err := call(func() C.flashAttnStatus_t { return C.flashAttnCreateTensorDescriptor(&d.raw) }); err != nil {
		return nil, err
	}
	runtime.SetFinalizer(d, (*TensorDescriptor).Close)
	err := call(func() C.flashAttnStatus_t {
		return C.flashAttnSetTensorDescriptor(d.raw, C.flashAttnDataType_t(dataType), C.int32_t(len(dims)),
			(*C.int64_t)(unsafe.Pointer(&d.dims[0])), (*C.int64_t)(unsafe.Pointer(&d.strides[0])))
	})
	if err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// NewContiguousTensorDescriptor makes a descriptor of a densely packed tensor, last dimension fastest.
func NewContiguousTensorDescriptor(dataType DataType, dims []int64) (*TensorDescriptor, error) {
	strides := make([]int64, len(dims))
	s := int64(1)
	for i := len(dims) - 1; i >= 0; i-- {
		strides[i] = s
		s *= dims[i]
	}
	return NewTensorDescriptor(dataType, dims, strides)
}

// Close destroys the descriptor; later calls do nothing.
func (d *TensorDescriptor) Close() error {
	if d.raw == nil {
		return nil
	}
	err := call(func() C.flashAttnStatus_t { return C.flashAttnDestroyTensorDescriptor(d.raw) })
	d.raw = nil
	runtime.SetFinalizer(d, nil)
	return err
}

func (d *TensorDescriptor) DataType() DataType { return d.dataType }
func (d *TensorDescriptor) Dims() []int64      { return append([]int64(nil), d.dims...) }
func (d *TensorDescriptor) Strides() []int64   { return append([]int64(nil), d.strides...) }

// Query reads the descriptor back from the library.
func (d *TensorDescriptor) Query() (DataType, []int64, []int64, error) {
	var dt C.flashAttnDataType_t
	var rank C.int32_t
	dims := make([]int64, MaxTensorRank)
	strides := make([]int64, MaxTensorRank)
	err := call(func() C.flashAttnStatus_t {
		return C.flashAttnGetTensorDescriptor(d.raw, MaxTensorRank, &dt, &rank,
			(*C.int64_t)(unsafe.Pointer(&dims[0])), (*C.int64_t)(unsafe.Pointer(&strides[0])))
	})
	runtime.KeepAlive(d)
	if err != nil {
		return 0, nil, nil, err
	}
	return DataType(dt), dims[:rank], strides[:rank], nil
}

// Span is the number of elements from the first to one past the last element the descriptor addresses:
// 1 + sum((dim - 1) * stride). ok is false when it does not fit an int.
func (d *TensorDescriptor) Span() (span int, ok bool) {
	last := new(big.Int)
	for i := range d.dims {
		last.Add(last, new(big.Int).Mul(big.NewInt(d.dims[i]-1), big.NewInt(d.strides[i])))
	}
	last.Add(last, big.NewInt(1))
	if !last.IsInt64() || last.Int64() < 0 || last.Int64() > int64(^uint(0)>>1) {
		return 0, false
	}
	return int(last.Int64()), true
}

func rawTensor(d *TensorDescriptor) C.flashAttnTensorDescriptor_t {
	if d == nil {
		return nil
	}
	return d.raw
}

// cCopy copies host values into C memory: the library keeps pointers set on the attention and sequence descriptors
// and reads them when an operation runs, and cgo forbids C from keeping Go memory.
func cCopy[T int32 | float32](values []T) unsafe.Pointer {
	if len(values) == 0 {
		return nil
	}
	size := C.size_t(len(values)) * C.size_t(unsafe.Sizeof(values[0]))
	p := C.malloc(size)
	if p == nil {
		panic("flashattn: out of memory")
	}
	copy(unsafe.Slice((*T)(p), len(values)), values)
	return p
}

// AttentionDescriptor holds scale, mask, window, softcap, ALiBi, attention sinks and determinism. Defaults: scale
// 1/sqrt(headDim), no mask, no window, no softcap, no ALiBi, no sinks, non-deterministic backward.
//
// Operations only read a descriptor, so several may share one, except that a descriptor with EnableSinksGradient
// serves one Backward at a time: each writes its dSinks into the same memory.
type AttentionDescriptor struct {
	raw          C.flashAttnAttentionDescriptor_t
	slopes       unsafe.Pointer // C copy of host slopes, freed after the descriptor is destroyed
	slopeCount   int
	slopesDevice bool
	perBatch     bool
	sinks        unsafe.Pointer // C copy of host sinks, freed after the descriptor is destroyed
	sinkCount    int
	sinksDevice  bool
	dSinks       unsafe.Pointer // C memory the HOST backward writes dSinks into (EnableSinksGradient)
	dSinkCount   int
	dSinksDevice bool
}

func NewAttentionDescriptor() (*AttentionDescriptor, error) {
	a := &AttentionDescriptor{}
	if err := call(func() C.flashAttnStatus_t { return C.flashAttnCreateAttentionDescriptor(&a.raw) }); err != nil {
		return nil, err
	}
	runtime.SetFinalizer(a, (*AttentionDescriptor).Close)
	return a, nil
}

// Close destroys the descriptor, then frees the slopes it pointed to.
func (a *AttentionDescriptor) Close() error {
	if a.raw == nil {
		return nil
	}
	err := call(func() C.flashAttnStatus_t { return C.flashAttnDestroyAttentionDescriptor(a.raw) })
	a.raw = nil
	C.free(a.slopes)
	a.slopes = nil
	C.free(a.sinks)
	C.free(a.dSinks)
	a.sinks, a.dSinks = nil, nil
	runtime.SetFinalizer(a, nil)
	return err
}

func (a *AttentionDescriptor) SetScale(scale float32) error {
	defer runtime.KeepAlive(a)
	return call(func() C.flashAttnStatus_t { return C.flashAttnSetAttentionScale(a.raw, C.float(scale)) })
}

// Scale is 0 while the default 1/sqrt(headDim) applies.
func (a *AttentionDescriptor) Scale() (float32, error) {
	defer runtime.KeepAlive(a)
	var v C.float
	err := call(func() C.flashAttnStatus_t { return C.flashAttnGetAttentionScale(a.raw, &v) })
	return float32(v), err
}

func (a *AttentionDescriptor) SetMask(mask MaskMode) error {
	defer runtime.KeepAlive(a)
	return call(func() C.flashAttnStatus_t { return C.flashAttnSetAttentionMask(a.raw, C.flashAttnMaskMode_t(mask)) })
}

func (a *AttentionDescriptor) Mask() (MaskMode, error) {
	defer runtime.KeepAlive(a)
	var v C.flashAttnMaskMode_t
	err := call(func() C.flashAttnStatus_t { return C.flashAttnGetAttentionMask(a.raw, &v) })
	return MaskMode(v), err
}

// SetWindow sets a sliding window around the bottom-right aligned diagonal; -1 is unbounded.
func (a *AttentionDescriptor) SetWindow(left, right int64) error {
	defer runtime.KeepAlive(a)
	return call(func() C.flashAttnStatus_t {
		return C.flashAttnSetAttentionWindow(a.raw, C.int64_t(left), C.int64_t(right))
	})
}

func (a *AttentionDescriptor) Window() (left, right int64, err error) {
	defer runtime.KeepAlive(a)
	var l, r C.int64_t
	err = call(func() C.flashAttnStatus_t { return C.flashAttnGetAttentionWindow(a.raw, &l, &r) })
	return int64(l), int64(r), err
}

// SetSoftcap sets logit soft-capping; 0 turns it off.
func (a *AttentionDescriptor) SetSoftcap(softcap float32) error {
	defer runtime.KeepAlive(a)
	return call(func() C.flashAttnStatus_t { return C.flashAttnSetAttentionSoftcap(a.raw, C.float(softcap)) })
}

func (a *AttentionDescriptor) Softcap() (float32, error) {
	defer runtime.KeepAlive(a)
	var v C.float
	err := call(func() C.flashAttnStatus_t { return C.flashAttnGetAttentionSoftcap(a.raw, &v) })
	return float32(v), err
}

func (a *AttentionDescriptor) SetDeterministic(deterministic bool) error {
	defer runtime.KeepAlive(a)
	flag := C.int32_t(0)
	if deterministic {
		flag = 1
	}
	return call(func() C.flashAttnStatus_t { return C.flashAttnSetAttentionDeterministic(a.raw, flag) })
}

func (a *AttentionDescriptor) Deterministic() (bool, error) {
	defer runtime.KeepAlive(a)
	var v C.int32_t
	err := call(func() C.flashAttnStatus_t { return C.flashAttnGetAttentionDeterministic(a.raw, &v) })
	return v != 0, err
}

func boolInt(b bool) C.int32_t {
	if b {
		return 1
	}
	return 0
}

// SetAlibiSlopes sets ALiBi slopes for HOST operations, copied into C memory that the descriptor owns: [heads], or
// [batch, heads] with perBatch. Operations check the count against their tensors before calling the library.
func (a *AttentionDescriptor) SetAlibiSlopes(slopes []float32, perBatch bool) error {
	defer runtime.KeepAlive(a)
	if len(slopes) == 0 {
		return refused("slopes: empty (use ClearAlibiSlopes to turn ALiBi off)")
	}
	p := cCopy(slopes)
	err := call(func() C.flashAttnStatus_t {
		return C.flashAttnSetAttentionAlibiSlopes(a.raw, (*C.float)(p), boolInt(perBatch))
	})
	if err != nil {
		C.free(p) // the library still points at the old slopes
		return err
	}
	C.free(a.slopes)
	a.slopes, a.slopeCount, a.slopesDevice, a.perBatch = p, len(slopes), false, perBatch
	return nil
}

// SetAlibiSlopesDevice sets ALiBi slopes in device memory for CUDA operations. The caller guarantees that the
// pointer holds heads (or batch*heads) floats and outlives every operation that uses the descriptor.
func (a *AttentionDescriptor) SetAlibiSlopesDevice(slopes uintptr, perBatch bool) error {
	defer runtime.KeepAlive(a)
	err := call(func() C.flashAttnStatus_t {
		return C.flashAttnSetAttentionAlibiSlopes(a.raw, (*C.float)(devPtr(slopes)), boolInt(perBatch))
	})
	if err != nil {
		return err
	}
	C.free(a.slopes)
	a.slopes, a.slopeCount, a.slopesDevice, a.perBatch = nil, 0, slopes != 0, perBatch
	return nil
}

func (a *AttentionDescriptor) ClearAlibiSlopes() error {
	return a.SetAlibiSlopesDevice(0, false)
}

// AlibiSlopes returns the slopes pointer the library holds (0 when ALiBi is off) and the per-batch flag.
func (a *AttentionDescriptor) AlibiSlopes() (uintptr, bool, error) {
	defer runtime.KeepAlive(a)
	var p *C.float
	var perBatch C.int32_t
	err := call(func() C.flashAttnStatus_t { return C.flashAttnGetAttentionAlibiSlopes(a.raw, &p, &perBatch) })
	return uintptr(unsafe.Pointer(p)), perBatch != 0, err
}

// SetSinks sets attention sinks for HOST operations (one logit per query head, [heads]), copied into C memory that
// the descriptor owns: each joins every row's softmax denominator of its head, without a value (docs/semantics.md,
// Attention sinks). Forward, DecodeChunk and Backward read them; they check the count against the heads first.
func (a *AttentionDescriptor) SetSinks(sinks []float32) error {
	defer runtime.KeepAlive(a)
	if len(sinks) == 0 {
		return refused("sinks: empty (use ClearSinks to turn sinks off)")
	}
	p := cCopy(sinks)
	err := call(func() C.flashAttnStatus_t { return C.flashAttnSetAttentionSinks(a.raw, (*C.float)(p)) })
	if err != nil {
		C.free(p)
		return err
	}
	C.free(a.sinks)
	a.sinks, a.sinkCount, a.sinksDevice = p, len(sinks), false
	return nil
}

// SetSinksDevice sets sinks in device memory for CUDA operations; the caller keeps them valid ([heads] floats).
func (a *AttentionDescriptor) SetSinksDevice(sinks uintptr) error {
	defer runtime.KeepAlive(a)
	err := call(func() C.flashAttnStatus_t { return C.flashAttnSetAttentionSinks(a.raw, (*C.float)(devPtr(sinks))) })
	if err != nil {
		return err
	}
	C.free(a.sinks)
	a.sinks, a.sinkCount, a.sinksDevice = nil, 0, sinks != 0
	return nil
}

func (a *AttentionDescriptor) ClearSinks() error { return a.SetSinksDevice(0) }

// Sinks returns the sinks pointer the library holds (0 when off).
func (a *AttentionDescriptor) Sinks() (uintptr, error) {
	defer runtime.KeepAlive(a)
	var p *C.float
	err := call(func() C.flashAttnStatus_t { return C.flashAttnGetAttentionSinks(a.raw, &p) })
	return uintptr(unsafe.Pointer(p)), err
}

// EnableSinksGradient makes HOST backwards write dSinks ([heads] floats, overwritten by each Backward) into C memory
// the descriptor owns; read it with SinksGradient after a Backward. The Backward needs the forward's sinks set too.
// heads <= 0 turns it off.
func (a *AttentionDescriptor) EnableSinksGradient(heads int) error {
	defer runtime.KeepAlive(a)
	if heads < 0 {
		heads = 0
	}
	var p unsafe.Pointer
	if heads > 0 {
		p = cCopy(make([]float32, heads))
	}
	err := call(func() C.flashAttnStatus_t { return C.flashAttnSetAttentionSinksGradient(a.raw, (*C.float)(p)) })
	if err != nil {
		C.free(p)
		return err
	}
	C.free(a.dSinks)
	a.dSinks, a.dSinkCount, a.dSinksDevice = p, heads, false
	return nil
}

// SetSinksGradientDevice makes CUDA backwards write dSinks into device memory; 0 turns it off.
func (a *AttentionDescriptor) SetSinksGradientDevice(dSinks uintptr) error {
	defer runtime.KeepAlive(a)
	err := call(func() C.flashAttnStatus_t {
		return C.flashAttnSetAttentionSinksGradient(a.raw, (*C.float)(devPtr(dSinks)))
	})
	if err != nil {
		return err
	}
	C.free(a.dSinks)
	a.dSinks, a.dSinkCount, a.dSinksDevice = nil, 0, dSinks != 0
	return nil
}

// SinksGradientPointer returns where the library writes dSinks (0 when not computed).
func (a *AttentionDescriptor) SinksGradientPointer() (uintptr, error) {
	defer runtime.KeepAlive(a)
	var p *C.float
	err := call(func() C.flashAttnStatus_t { return C.flashAttnGetAttentionSinksGradient(a.raw, &p) })
	return uintptr(unsafe.Pointer(p)), err
}

// SinksGradient copies out the dSinks the last HOST Backward wrote (nil when EnableSinksGradient is off).
func (a *AttentionDescriptor) SinksGradient() []float32 {
	defer runtime.KeepAlive(a)
	if a.dSinks == nil {
		return nil
	}
	return append([]float32(nil), unsafe.Slice((*float32)(a.dSinks), a.dSinkCount)...)
}

func rawAttn(a *AttentionDescriptor) C.flashAttnAttentionDescriptor_t {
	if a == nil {
		return nil
	}
	return a.raw
}

// SeqDescriptor describes ragged batches, per-sequence KV lengths and paged KV caches. The library reads its arrays
// when an operation runs; the host setters copy them into C memory that the descriptor owns.
type SeqDescriptor struct {
	raw                        C.flashAttnSeqDescriptor_t
	cuQ, cuK, kvLengths, table unsafe.Pointer
	raggedBatch                int
	device                     bool
}

func NewSeqDescriptor() (*SeqDescriptor, error) {
	s := &SeqDescriptor{}
	if err := call(func() C.flashAttnStatus_t { return C.flashAttnCreateSeqDescriptor(&s.raw) }); err != nil {
		return nil, err
	}
	runtime.SetFinalizer(s, (*SeqDescriptor).Close)
	return s, nil
}

// Close destroys the descriptor, then frees the arrays it pointed to.
func (s *SeqDescriptor) Close() error {
	if s.raw == nil {
		return nil
	}
	err := call(func() C.flashAttnStatus_t { return C.flashAttnDestroySeqDescriptor(s.raw) })
	s.raw = nil
	for _, p := range []unsafe.Pointer{s.cuQ, s.cuK, s.kvLengths, s.table} {
		C.free(p)
	}
	s.cuQ, s.cuK, s.kvLengths, s.table = nil, nil, nil, nil
	runtime.SetFinalizer(s, nil)
	return err
}

// SetRagged sets a ragged batch of len(cuSeqlensQ)-1 sequences (prefix sums starting at 0).
func (s *SeqDescriptor) SetRagged(cuSeqlensQ, cuSeqlensK []int32, maxSeqlenQ, maxSeqlenK int64) error {
	defer runtime.KeepAlive(s)
	if len(cuSeqlensQ) != len(cuSeqlensK) {
		return refused("cuSeqlensK: %d elements, cuSeqlensQ has %d", len(cuSeqlensK), len(cuSeqlensQ))
	}
	if len(cuSeqlensQ) < 2 {
		return refused("cuSeqlensQ: %d elements, a batch needs at least 2", len(cuSeqlensQ))
	}
	q, k := cCopy(cuSeqlensQ), cCopy(cuSeqlensK)
	err := call(func() C.flashAttnStatus_t {
		return C.flashAttnSetSeqRagged(s.raw, C.int64_t(len(cuSeqlensQ)-1), (*C.int32_t)(q), (*C.int32_t)(k),
			C.int64_t(maxSeqlenQ), C.int64_t(maxSeqlenK))
	})
	if err != nil {
		C.free(q)
		C.free(k)
		return err
	}
	C.free(s.cuQ)
	C.free(s.cuK)
	s.cuQ, s.cuK, s.raggedBatch = q, k, len(cuSeqlensQ)-1
	return nil
}

// ClearRagged leaves ragged mode.
func (s *SeqDescriptor) ClearRagged() error {
	defer runtime.KeepAlive(s)
	err := call(func() C.flashAttnStatus_t { return C.flashAttnSetSeqRagged(s.raw, 1, nil, nil, 1, 1) })
	if err == nil {
		C.free(s.cuQ)
		C.free(s.cuK)
		s.cuQ, s.cuK, s.raggedBatch = nil, nil, 0
	}
	return err
}

// SetKvLengths sets the used KV length of each sequence of a dense or paged cache.
func (s *SeqDescriptor) SetKvLengths(seqlensK []int32) error {
	defer runtime.KeepAlive(s)
	if len(seqlensK) == 0 {
		return refused("seqlensK: empty (use ClearKvLengths)")
	}
	p := cCopy(seqlensK)
	err := call(func() C.flashAttnStatus_t {
		return C.flashAttnSetSeqKvLengths(s.raw, C.int64_t(len(seqlensK)), (*C.int32_t)(p))
	})
	if err != nil {
		C.free(p)
		return err
	}
	C.free(s.kvLengths)
	s.kvLengths = p
	return nil
}

func (s *SeqDescriptor) ClearKvLengths() error {
	defer runtime.KeepAlive(s)
	err := call(func() C.flashAttnStatus_t { return C.flashAttnSetSeqKvLengths(s.raw, 0, nil) })
	if err == nil {
		C.free(s.kvLengths)
		s.kvLengths = nil
	}
	return err
}

// SetPaged sets a paged cache; blockTable is [batch, maxPagesPerSeq], row-major.
func (s *SeqDescriptor) SetPaged(blockTable []int32, maxPagesPerSeq int64) error {
	defer runtime.KeepAlive(s)
	if maxPagesPerSeq < 1 || len(blockTable) == 0 || int64(len(blockTable))%maxPagesPerSeq != 0 {
		return refused("blockTable: %d elements are not whole rows of maxPagesPerSeq = %d", len(blockTable),
			maxPagesPerSeq)
	}
	p := cCopy(blockTable)
	err := call(func() C.flashAttnStatus_t {
		return C.flashAttnSetSeqPaged(s.raw, C.int64_t(int64(len(blockTable))/maxPagesPerSeq), (*C.int32_t)(p),
			C.int64_t(maxPagesPerSeq))
	})
	if err != nil {
		C.free(p)
		return err
	}
	C.free(s.table)
	s.table = p
	return nil
}

func (s *SeqDescriptor) ClearPaged() error {
	defer runtime.KeepAlive(s)
	err := call(func() C.flashAttnStatus_t { return C.flashAttnSetSeqPaged(s.raw, 0, nil, 1) })
	if err == nil {
		C.free(s.table)
		s.table = nil
	}
	return err
}

// SetRaggedDevice sets a ragged batch with arrays in device memory ([batch+1] int32 each). The caller guarantees the
// pointers and their lifetime.
func (s *SeqDescriptor) SetRaggedDevice(batch int64, cuSeqlensQ, cuSeqlensK uintptr, maxSeqlenQ, maxSeqlenK int64) error {
	defer runtime.KeepAlive(s)
	err := call(func() C.flashAttnStatus_t {
		return C.flashAttnSetSeqRagged(s.raw, C.int64_t(batch), (*C.int32_t)(devPtr(cuSeqlensQ)),
			(*C.int32_t)(devPtr(cuSeqlensK)), C.int64_t(maxSeqlenQ), C.int64_t(maxSeqlenK))
	})
	if err == nil {
		s.device = true
	}
	return err
}

// SetKvLengthsDevice sets KV lengths in device memory ([batch] int32).
func (s *SeqDescriptor) SetKvLengthsDevice(batch int64, seqlensK uintptr) error {
	defer runtime.KeepAlive(s)
	err := call(func() C.flashAttnStatus_t {
		return C.flashAttnSetSeqKvLengths(s.raw, C.int64_t(batch), (*C.int32_t)(devPtr(seqlensK)))
	})
	if err == nil {
		s.device = true
	}
	return err
}

// SetPagedDevice sets a block table in device memory ([batch, maxPagesPerSeq] int32).
func (s *SeqDescriptor) SetPagedDevice(batch int64, blockTable uintptr, maxPagesPerSeq int64) error {
	defer runtime.KeepAlive(s)
	err := call(func() C.flashAttnStatus_t {
		return C.flashAttnSetSeqPaged(s.raw, C.int64_t(batch), (*C.int32_t)(devPtr(blockTable)),
			C.int64_t(maxPagesPerSeq))
	})
	if err == nil {
		s.device = true
	}
	return err
}

// Ragged returns the ragged setting; batch is 0 when not ragged.
func (s *SeqDescriptor) Ragged() (batch, maxSeqlenQ, maxSeqlenK int64, err error) {
	defer runtime.KeepAlive(s)
	var b, mq, mk C.int64_t
	var q, k *C.int32_t
	err = call(func() C.flashAttnStatus_t { return C.flashAttnGetSeqRagged(s.raw, &b, &q, &k, &mq, &mk) })
	return int64(b), int64(mq), int64(mk), err
}

// KvLengthsBatch is the batch of the KV lengths, 0 when unset.
func (s *SeqDescriptor) KvLengthsBatch() (int64, error) {
	defer runtime.KeepAlive(s)
	var b C.int64_t
	var p *C.int32_t
	err := call(func() C.flashAttnStatus_t { return C.flashAttnGetSeqKvLengths(s.raw, &b, &p) })
	return int64(b), err
}

// Paged returns the paged setting; batch is 0 when unset.
func (s *SeqDescriptor) Paged() (batch, maxPagesPerSeq int64, err error) {
	defer runtime.KeepAlive(s)
	var b, m C.int64_t
	var p *C.int32_t
	err = call(func() C.flashAttnStatus_t { return C.flashAttnGetSeqPaged(s.raw, &b, &p, &m) })
	return int64(b), int64(m), err
}

func rawSeq(s *SeqDescriptor) C.flashAttnSeqDescriptor_t {
	if s == nil {
		return nil
	}
	return s.raw
}
