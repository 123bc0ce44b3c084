package flashattn

// Bad input: the library's status and message come back as *Error, nothing is written (a canary output keeps its
// values), and slices of the wrong length or element type are refused before the library is called.

import (
	"errors"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
)

const canary = float32(7.25)

type problem struct {
	q, kv, lse *TensorDescriptor
	qd, kd, vd []float32
}

// newProblem is a valid GQA forward: Q/O [1, 4, 3, 8], K/V [1, kvHeads, 5, 8].
func newProblem(t *testing.T, kvHeads int64) *problem {
	t.Helper()
	q, err1 := NewContiguousTensorDescriptor(DataFP32, []int64{1, 4, 3, 8})
	kv, err2 := NewContiguousTensorDescriptor(DataFP32, []int64{1, kvHeads, 5, 8})
	lse, err3 := NewContiguousTensorDescriptor(DataFP32, []int64{1, 4, 3})
	for _, err := range []error{err1, err2, err3} {
		if err != nil {
			t.Fatal(err)
		}
	}
	n := int(kvHeads * 40)
	p := &problem{q: q, kv: kv, lse: lse, qd: make([]float32, 96), kd: make([]float32, n), vd: make([]float32, n)}
	for i := range p.qd {
		p.qd[i] = float32(math.Sin(0.37 * float64(i)))
	}
	for i := range p.kd {
		p.kd[i] = float32(math.Cos(0.11 * float64(i)))
		p.vd[i] = float32(math.Sin(0.23 * float64(i)))
	}
	return p
}

func filled(n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = canary
	}
	return s
}

func untouched(s []float32) bool {
	for _, x := range s {
		if x != canary {
			return false
		}
	}
	return true
}

func hostHandle(t *testing.T) *Handle {
	t.Helper()
	h, err := NewHandleWithBackend(BackendHost)
	if err != nil {
		t.Fatal(err)
	}
	if h.Backend() != BackendHost {
		t.Fatalf("asked for HOST, got %v", h.Backend())
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// libraryMessage reads the library's last message on the calling thread (the caller locks it).
func libraryMessage() string { return lastErrorMessage() }

func asError(t *testing.T, err error) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("want an *Error, got %v", err)
	}
	return e
}

func TestAValidForwardWritesItsOutputs(t *testing.T) {
	// The counterpart of the refusals: the same problem with correct arguments does write o and lse, so an
	// unchanged canary below means the call was stopped.
	p := newProblem(t, 2)
	o, lse := filled(96), filled(12)
	l := F32(p.lse, lse)
	if err := hostHandle(t).Forward(nil, nil, F32(p.q, p.qd), F32(p.kv, p.kd), F32(p.kv, p.vd), F32(p.q, o),
		&l); err != nil {
		t.Fatal(err)
	}
	for _, x := range append(o, lse...) {
		if x == canary || math.IsNaN(float64(x)) {
			t.Fatalf("an output was not written: %v", x)
		}
	}
}

func TestLibraryStatusAndMessageComeBackAndNothingIsWritten(t *testing.T) {
	// 4 query heads over 3 KV heads: valid descriptors, an invalid problem that only the library judges.
	p := newProblem(t, 3)
	o := filled(96)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	err := hostHandle(t).Forward(nil, nil, F32(p.q, p.qd), F32(p.kv, p.kd), F32(p.kv, p.vd), F32(p.q, o), nil)
	e := asError(t, err)
	if e.Status != StatusBadParam || !e.FromLibrary || e.Message == "" {
		t.Fatalf("got %+v", e)
	}
	if e.Message != libraryMessage() {
		t.Fatalf("message %q is not the library's %q", e.Message, libraryMessage())
	}
	if !strings.Contains(e.Message, "3") || !strings.Contains(e.Message, "4") {
		t.Fatalf("the message should name the values: %q", e.Message)
	}
	if !strings.HasPrefix(err.Error(), "FLASHATTN_STATUS_BAD_PARAM: ") {
		t.Fatalf("Error() = %q", err.Error())
	}
	if !untouched(o) {
		t.Fatal("a failed call wrote its output")
	}
}

func TestAShortInputSliceIsRefusedBeforeTheCall(t *testing.T) {
	p := newProblem(t, 2)
	o := filled(96)
	h := hostHandle(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// Leave a known library message behind; a refused call must not replace it (nor, with the canary, succeed).
	if _, err := NewTensorDescriptor(DataFP32, []int64{2, 2}, []int64{2, 2}); err == nil {
		t.Fatal("a last stride of 2 was accepted")
	}
	before := libraryMessage()
	err := h.Forward(nil, nil, F32(p.q, p.qd[:95]), F32(p.kv, p.kd), F32(p.kv, p.vd), F32(p.q, o), nil)
	e := asError(t, err)
	if e.Status != StatusBadParam || e.FromLibrary || !strings.HasPrefix(e.Message, "q: ") ||
		!strings.Contains(e.Message, "95") || !strings.Contains(e.Message, "96") {
		t.Fatalf("got %+v", e)
	}
	if !untouched(o) || libraryMessage() != before {
		t.Fatal("the library was called")
	}
}

func TestShortOutputSlicesAreRefusedByName(t *testing.T) {
	p := newProblem(t, 2)
	h := hostHandle(t)
	o := filled(95)
	e := asError(t, h.Forward(nil, nil, F32(p.q, p.qd), F32(p.kv, p.kd), F32(p.kv, p.vd), F32(p.q, o), nil))
	if !strings.HasPrefix(e.Message, "o: ") || !untouched(o) {
		t.Fatalf("got %+v", e)
	}
	o, lse := filled(96), filled(11)
	l := F32(p.lse, lse)
	e = asError(t, h.Forward(nil, nil, F32(p.q, p.qd), F32(p.kv, p.kd), F32(p.kv, p.vd), F32(p.q, o), &l))
	if !strings.HasPrefix(e.Message, "lse: ") || !untouched(o) || !untouched(lse) {
		t.Fatalf("got %+v", e)
	}
}

func TestStridedViewsNeedOnlyTheirSpan(t *testing.T) {
	// Q reads every other row of a [1, 4, 6, 8] buffer: the span is shorter than the buffer, and enough.
	q, err := NewTensorDescriptor(DataFP32, []int64{1, 4, 3, 8}, []int64{192, 48, 16, 1})
	if err != nil {
		t.Fatal(err)
	}
	span, ok := q.Span()
	if !ok || span != 3*48+2*16+8 {
		t.Fatalf("span %d", span)
	}
	p := newProblem(t, 2)
	qd := make([]float32, span)
	o := filled(96)
	h := hostHandle(t)
	if err := h.Forward(nil, nil, F32(q, qd), F32(p.kv, p.kd), F32(p.kv, p.vd), F32(p.q, o), nil); err != nil {
		t.Fatal(err)
	}
	e := asError(t, h.Forward(nil, nil, F32(q, qd[:span-1]), F32(p.kv, p.kd), F32(p.kv, p.vd), F32(p.q, o), nil))
	if !strings.HasPrefix(e.Message, "q: ") {
		t.Fatalf("got %+v", e)
	}
}

func TestASliceOfTheWrongElementTypeIsRefused(t *testing.T) {
	p := newProblem(t, 2)
	q16, k16, o16 := make([]uint16, 96), make([]uint16, 80), make([]uint16, 96)
	e := asError(t, hostHandle(t).Forward(nil, nil, U16(p.q, q16), U16(p.kv, k16), U16(p.kv, k16), U16(p.q, o16), nil))
	if !strings.HasPrefix(e.Message, "q: ") || !strings.Contains(e.Message, "FP32") {
		t.Fatalf("got %+v", e)
	}
}

func TestDescriptorErrorsCarryTheLibraryMessage(t *testing.T) {
	_, err := NewTensorDescriptor(DataFP32, []int64{1, 2, 3, 8}, []int64{48, 24, 8, 2})
	if e := asError(t, err); e.Status != StatusBadParam || !e.FromLibrary || e.Message == "" {
		t.Fatalf("got %+v", e)
	}
	_, err = NewTensorDescriptor(DataFP32, []int64{1, 2}, []int64{2})
	if e := asError(t, err); e.FromLibrary || !strings.HasPrefix(e.Message, "strides: ") {
		t.Fatalf("got %+v", e)
	}
	a, err := NewAttentionDescriptor()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if e := asError(t, a.SetScale(-1)); e.Status != StatusBadParam {
		t.Fatalf("got %+v", e)
	}
	if s, _ := a.Scale(); s != 0 {
		t.Fatalf("a failed setter changed the scale to %v", s)
	}
	if a.SetWindow(-2, 0) == nil || a.SetSoftcap(float32(math.NaN())) == nil {
		t.Fatal("invalid window or softcap accepted")
	}
}

func TestDescriptorsReadBackWhatWasSet(t *testing.T) {
	d, err := NewTensorDescriptor(DataBF16, []int64{2, 3, 4, 8}, []int64{96, 8, 24, 1})
	if err != nil {
		t.Fatal(err)
	}
	dt, dims, strides, err := d.Query()
	if err != nil || dt != DataBF16 || len(dims) != 4 || dims[2] != 4 || strides[1] != 8 {
		t.Fatalf("Query: %v %v %v %v", dt, dims, strides, err)
	}
	d.Close()
	if d.Close() != nil {
		t.Fatal("a second Close failed")
	}

	a, _ := NewAttentionDescriptor()
	defer a.Close()
	for _, err := range []error{a.SetScale(0.5), a.SetMask(MaskCausalTopLeft), a.SetWindow(4, 0), a.SetSoftcap(30),
		a.SetDeterministic(true), a.SetAlibiSlopes([]float32{0.5, 0.25}, true)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	scale, _ := a.Scale()
	mask, _ := a.Mask()
	l, r, _ := a.Window()
	softcap, _ := a.Softcap()
	det, _ := a.Deterministic()
	ptr, perBatch, _ := a.AlibiSlopes()
	if scale != 0.5 || mask != MaskCausalTopLeft || l != 4 || r != 0 || softcap != 30 || !det || ptr == 0 || !perBatch {
		t.Fatalf("read back %v %v %v %v %v %v %#x %v", scale, mask, l, r, softcap, det, ptr, perBatch)
	}
	if err := a.ClearAlibiSlopes(); err != nil {
		t.Fatal(err)
	}
	if ptr, _, _ := a.AlibiSlopes(); ptr != 0 {
		t.Fatal("slopes not cleared")
	}

	s, _ := NewSeqDescriptor()
	defer s.Close()
	if err := s.SetRagged([]int32{0, 3, 5}, []int32{0, 4, 9}, 3, 5); err != nil {
		t.Fatal(err)
	}
	if b, mq, mk, _ := s.Ragged(); b != 2 || mq != 3 || mk != 5 {
		t.Fatalf("ragged %d %d %d", b, mq, mk)
	}
	if err := s.SetKvLengths([]int32{4, 5}); err != nil {
		t.Fatal(err)
	}
	if b, _ := s.KvLengthsBatch(); b != 2 {
		t.Fatalf("kv lengths batch %d", b)
	}
	if err := s.SetPaged([]int32{0, 1, 2, 3, 4, 5}, 3); err != nil {
		t.Fatal(err)
	}
	if b, m, _ := s.Paged(); b != 2 || m != 3 {
		t.Fatalf("paged %d %d", b, m)
	}
	if e := asError(t, s.SetPaged([]int32{0, 1, 2, 3}, 3)); !strings.HasPrefix(e.Message, "blockTable: ") {
		t.Fatalf("got %+v", e)
	}
	if s.ClearPaged() != nil || s.ClearKvLengths() != nil || s.ClearRagged() != nil {
		t.Fatal("clearing failed")
	}
	if b, _, _ := s.Paged(); b != 0 {
		t.Fatal("paged not cleared")
	}
}

func TestTooFewAlibiSlopesAreRefused(t *testing.T) {
	p := newProblem(t, 2)
	a, _ := NewAttentionDescriptor()
	defer a.Close()
	if err := a.SetAlibiSlopes([]float32{0.5, 0.25, 0.125}, false); err != nil {
		t.Fatal(err)
	}
	h := hostHandle(t)
	o := filled(96)
	e := asError(t, h.Forward(a, nil, F32(p.q, p.qd), F32(p.kv, p.kd), F32(p.kv, p.vd), F32(p.q, o), nil))
	if !strings.HasPrefix(e.Message, "alibi slopes: ") || !untouched(o) {
		t.Fatalf("got %+v", e)
	}
	if err := a.SetAlibiSlopes([]float32{0.5, 0.25, 0.125, 0.0625}, false); err != nil {
		t.Fatal(err)
	}
	if err := h.Forward(a, nil, F32(p.q, p.qd), F32(p.kv, p.kd), F32(p.kv, p.vd), F32(p.q, o), nil); err != nil {
		t.Fatal(err)
	}
}

func TestClosedObjectsAreRefused(t *testing.T) {
	p := newProblem(t, 2)
	h := hostHandle(t)
	p.kv.Close()
	o := filled(96)
	e := asError(t, h.Forward(nil, nil, F32(p.q, p.qd), F32(p.kv, p.kd), F32(p.kv, p.vd), F32(p.q, o), nil))
	if !strings.HasPrefix(e.Message, "k: ") || !untouched(o) {
		t.Fatalf("got %+v", e)
	}
	h.Close()
	p2 := newProblem(t, 2)
	e = asError(t, h.Forward(nil, nil, F32(p2.q, p2.qd), F32(p2.kv, p2.kd), F32(p2.kv, p2.vd), F32(p2.q, o), nil))
	if !strings.Contains(e.Message, "closed") {
		t.Fatalf("got %+v", e)
	}
	// The library's own answer to a NULL descriptor comes back as a status.
	_, _, _, err := p.kv.Query()
	if e := asError(t, err); e.Status != StatusNotInitialized || !e.FromLibrary {
		t.Fatalf("got %+v", e)
	}
}

func TestCheckSupportReportsOrRefuses(t *testing.T) {
	p := newProblem(t, 2)
	h := hostHandle(t)
	s, err := h.CheckSupport(OpForward, nil, nil, p.q, p.kv, p.kv, p.q)
	if err != nil || s.Description == "" || !s.Deterministic {
		t.Fatalf("%+v %v", s, err)
	}
	bad := newProblem(t, 3)
	_, err = h.CheckSupport(OpForward, nil, nil, bad.q, bad.kv, bad.kv, bad.q)
	if e := asError(t, err); e.Status != StatusBadParam {
		t.Fatalf("got %+v", e)
	}
}

func TestACudaHandleIsRefusedOrServed(t *testing.T) {
	h, err := NewHandleWithBackend(BackendCUDA)
	if err != nil {
		// No GPU, or no CUDA backend in this build: the library says which.
		e := asError(t, err)
		if e.Status != StatusNoDevice && e.Status != StatusNotSupported && e.Status != StatusArchMismatch {
			t.Fatalf("got %+v", e)
		}
		return
	}
	defer h.Close()
	p := newProblem(t, 2)
	e := asError(t, h.Forward(nil, nil, F32(p.q, p.qd), F32(p.kv, p.kd), F32(p.kv, p.vd), F32(p.q, filled(96)), nil))
	if !strings.HasPrefix(e.Message, "Forward: ") {
		t.Fatalf("got %+v", e)
	}
}

func TestMessagesStayWithTheirGoroutineUnderLoad(t *testing.T) {
	// Many goroutines fail with different messages at once; each must get its own call's message even though the
	// scheduler moves goroutines between threads (call locks the thread until the message is read).
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			a, err := NewAttentionDescriptor()
			if err != nil {
				errs <- err.Error()
				return
			}
			defer a.Close()
			for i := 0; i < 50; i++ {
				var e *Error
				if g%2 == 0 {
					errors.As(a.SetWindow(-2-int64(g), 0), &e)
					if e == nil || !strings.Contains(e.Message, "left") {
						errs <- "window: " + e.Error()
					}
				} else {
					errors.As(a.SetSoftcap(-1), &e)
					if e == nil || !strings.Contains(e.Message, "oftcap") {
						errs <- "softcap: " + e.Error()
					}
				}
				runtime.Gosched()
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestStatusNames(t *testing.T) {
	if StatusBadParam.String() != "FLASHATTN_STATUS_BAD_PARAM" || Status(42).String() != "FLASHATTN_STATUS_UNKNOWN" {
		t.Fatalf("%v %v", StatusBadParam, Status(42))
	}
	if Version() != 100 {
		t.Fatalf("this binding is 0.1.0, the library %d", Version())
	}
}
