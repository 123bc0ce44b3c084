package flashattn

// Attention sinks on a HOST handle: Forward and DecodeChunk against attention with sinks written out in float64
// here, dSinks from Backward with EnableSinksGradient against its formula, and what is refused before the library is
// called. The shared vectors (vectors_test.go) check the same against the project's oracle.

import (
	"math"
	"strings"
	"testing"
)

const (
	snB, snH, snHK, snSQ, snSK, snD = 2, 4, 2, 5, 3, 8
)

// sinkProblem is Q, O, dO [2, 4, 5, 8] and K, V [2, 2, 3, 8], packed. With the bottom-right causal mask and more
// queries than keys, rows 0 and 1 of every head see no key: the sink is all their softmax.
type sinkProblem struct {
	q, kv, lse      *TensorDescriptor
	qd, kd, vd, dOd []float32
	sinks           []float32
}

func newSinkProblem(t *testing.T) *sinkProblem {
	t.Helper()
	q, err1 := NewContiguousTensorDescriptor(DataFP32, []int64{snB, snH, snSQ, snD})
	kv, err2 := NewContiguousTensorDescriptor(DataFP32, []int64{snB, snHK, snSK, snD})
	lse, err3 := NewContiguousTensorDescriptor(DataFP32, []int64{snB, snH, snSQ})
	for _, err := range []error{err1, err2, err3} {
		if err != nil {
			t.Fatal(err)
		}
	}
	nq, nk := snB*snH*snSQ*snD, snB*snHK*snSK*snD
	p := &sinkProblem{q: q, kv: kv, lse: lse, qd: make([]float32, nq), kd: make([]float32, nk),
		vd: make([]float32, nk), dOd: make([]float32, nq),
		// Near the logits (|q.k| / sqrt(8) < 1.5), one far above them, one far below.
		sinks: []float32{0.4, -6, 1.1, 5}}
	for i := range p.qd {
		p.qd[i] = float32(math.Sin(0.37 * float64(i)))
		p.dOd[i] = float32(math.Cos(0.19*float64(i) + 1))
	}
	for i := range p.kd {
		p.kd[i] = float32(math.Cos(0.11*float64(i) + 0.5))
		p.vd[i] = float32(math.Sin(0.23 * float64(i)))
	}
	return p
}

func causalAttention(t *testing.T, sinks []float32) *AttentionDescriptor {
	t.Helper()
	a, err := NewAttentionDescriptor()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if err := a.SetMask(MaskCausalBottomRight); err != nil {
		t.Fatal(err)
	}
	if sinks != nil {
		if err := a.SetSinks(sinks); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

// reference is O and LSE in float64: row i sees keys j <= i + SK - SQ, and exp(sink) joins its denominator.
func (p *sinkProblem) reference() (o, lse []float64) {
	scale := 1 / math.Sqrt(snD)
	o = make([]float64, snB*snH*snSQ*snD)
	lse = make([]float64, snB*snH*snSQ)
	for b := 0; b < snB; b++ {
		for h := 0; h < snH; h++ {
			kh := h / (snH / snHK)
			for i := 0; i < snSQ; i++ {
				row := (b*snH+h)*snSQ + i
				visible := i + snSK - snSQ + 1
				if visible < 0 {
					visible = 0
				}
				logits := make([]float64, visible)
				sink := float64(p.sinks[h])
				top := sink
				for j := range logits {
					key := ((b*snHK+kh)*snSK + j) * snD
					for x := 0; x < snD; x++ {
						logits[j] += float64(p.qd[row*snD+x]) * float64(p.kd[key+x])
					}
					logits[j] *= scale
					top = math.Max(top, logits[j])
				}
				sum := math.Exp(sink - top)
				for _, l := range logits {
					sum += math.Exp(l - top)
				}
				lse[row] = top + math.Log(sum)
				for x := 0; x < snD; x++ {
					for j, l := range logits {
						o[row*snD+x] += math.Exp(l-lse[row]) * float64(p.vd[((b*snHK+kh)*snSK+j)*snD+x])
					}
				}
			}
		}
	}
	return o, lse
}

func maxError(got []float32, want []float64) float64 {
	e := 0.0
	for i := range want {
		e = math.Max(e, math.Abs(float64(got[i])-want[i]))
	}
	return e
}

func nanFilled(n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(math.NaN())
	}
	return s
}

func (p *sinkProblem) forward(t *testing.T, h *Handle, attn *AttentionDescriptor) (o, lse []float32) {
	t.Helper()
	o, lse = nanFilled(len(p.qd)), nanFilled(snB*snH*snSQ)
	lt := F32(p.lse, lse)
	if err := h.Forward(attn, nil, F32(p.q, p.qd), F32(p.kv, p.kd), F32(p.kv, p.vd), F32(p.q, o), &lt); err != nil {
		t.Fatal(err)
	}
	return o, lse
}

func TestForwardAndDecodeWithSinksMatchAFloat64Reference(t *testing.T) {
	h := hostHandle(t)
	p := newSinkProblem(t)
	attn := causalAttention(t, p.sinks)
	o, lse := p.forward(t, h, attn)
	refO, refLse := p.reference()
	if e := maxError(o, refO); e > 1e-5 {
		t.Errorf("o: max error %g", e)
	}
	if e := maxError(lse, refLse); e > 1e-5 {
		t.Errorf("lse: max error %g", e)
	}
	for b := 0; b < snB; b++ {
		for hd := 0; hd < snH; hd++ {
			for i := 0; i < 2; i++ {
				row := (b*snH+hd)*snSQ + i
				if lse[row] != p.sinks[hd] {
					t.Errorf("row %d sees no key: LSE %g, want its sink %g", row, lse[row], p.sinks[hd])
				}
				for _, x := range o[row*snD : (row+1)*snD] {
					if x != 0 {
						t.Errorf("row %d sees no key: O has %g, want 0", row, x)
					}
				}
			}
		}
	}
	// The sinks are not a no-op here: without them the result is far from the reference.
	plain, _ := p.forward(t, h, causalAttention(t, nil))
	if e := maxError(plain, refO); e < 1e-2 {
		t.Errorf("without sinks the result is within %g of the reference with sinks", e)
	}

	// The decode adds each sink once, after its chunks are folded: the same result whatever the chunk count.
	for _, chunks := range []int32{1, 2, 3} {
		od, lsed := nanFilled(len(p.qd)), nanFilled(snB*snH*snSQ)
		lt := F32(p.lse, lsed)
		if err := h.DecodeChunk(attn, nil, F32(p.q, p.qd), F32(p.kv, p.kd), F32(p.kv, p.vd), F32(p.q, od), &lt,
			chunks); err != nil {
			t.Fatal(err)
		}
		if e := math.Max(maxError(od, refO), maxError(lsed, refLse)); e > 1e-5 {
			t.Errorf("decode in %d chunks: max error %g", chunks, e)
		}
	}
}

func TestTheDescriptorKeepsItsOwnCopyOfTheSinks(t *testing.T) {
	h := hostHandle(t)
	p := newSinkProblem(t)
	attn := causalAttention(t, nil)
	if ptr, err := attn.Sinks(); err != nil || ptr != 0 {
		t.Fatalf("a new descriptor has sinks %#x (%v)", ptr, err)
	}
	mine := append([]float32(nil), p.sinks...)
	if err := attn.SetSinks(mine); err != nil {
		t.Fatal(err)
	}
	if ptr, err := attn.Sinks(); err != nil || ptr == 0 {
		t.Fatalf("sinks pointer %#x (%v) after SetSinks", ptr, err)
	}
	for i := range mine {
		mine[i] = float32(math.NaN())
	}
	if _, lse := p.forward(t, h, attn); lse[0] != p.sinks[0] {
		t.Errorf("changing the caller's slice changed the sinks: LSE %g", lse[0])
	}
	if err := attn.ClearSinks(); err != nil {
		t.Fatal(err)
	}
	if ptr, _ := attn.Sinks(); ptr != 0 {
		t.Errorf("ClearSinks left %#x", ptr)
	}
}

func TestBackwardWritesTheSinksGradient(t *testing.T) {
	h := hostHandle(t)
	p := newSinkProblem(t)
	attn := causalAttention(t, p.sinks)
	o, lse := p.forward(t, h, attn)
	if got := attn.SinksGradient(); got != nil {
		t.Fatalf("SinksGradient before EnableSinksGradient: %v", got)
	}

	// dSinks[h] = -sum over the batch and the rows of head h of exp(s_h - LSE) (dO . O), from the O and LSE the
	// backward is given.
	want := make([]float64, snH)
	for b := 0; b < snB; b++ {
		for hd := 0; hd < snH; hd++ {
			for i := 0; i < snSQ; i++ {
				row := (b*snH+hd)*snSQ + i
				dot := 0.0
				for x := 0; x < snD; x++ {
					dot += float64(p.dOd[row*snD+x]) * float64(o[row*snD+x])
				}
				want[hd] -= math.Exp(float64(p.sinks[hd])-float64(lse[row])) * dot
			}
		}
	}
	for hd, w := range want {
		if math.Abs(w) < 1e-3 {
			t.Fatalf("head %d's dSinks %g is too close to 0 to tell", hd, w)
		}
	}

	if err := attn.EnableSinksGradient(snH); err != nil {
		t.Fatal(err)
	}
	backward := func() []float32 {
		dq, dk, dv := nanFilled(len(p.qd)), nanFilled(len(p.kd)), nanFilled(len(p.vd))
		if err := h.Backward(attn, nil, F32(p.q, p.qd), F32(p.kv, p.kd), F32(p.kv, p.vd), F32(p.q, o),
			F32(p.q, p.dOd), F32(p.lse, lse), F32(p.q, dq), F32(p.kv, dk), F32(p.kv, dv)); err != nil {
			t.Fatal(err)
		}
		return attn.SinksGradient()
	}
	got := backward()
	if len(got) != snH {
		t.Fatalf("SinksGradient has %d values, want %d", len(got), snH)
	}
	if e := maxError(got, want); e > 1e-5 {
		t.Errorf("dSinks %v, want %v (max error %g)", got, want, e)
	}
	// Overwritten by each Backward, never accumulated into.
	again := backward()
	for i := range got {
		if math.Float32bits(again[i]) != math.Float32bits(got[i]) {
			t.Errorf("a second Backward gave dSinks %v, the first %v", again, got)
			break
		}
	}
	if err := attn.EnableSinksGradient(0); err != nil {
		t.Fatal(err)
	}
	if ptr, _ := attn.SinksGradientPointer(); ptr != 0 || attn.SinksGradient() != nil {
		t.Errorf("EnableSinksGradient(0) left %#x", ptr)
	}
}

func TestSinksAHostOperationCannotUseAreRefused(t *testing.T) {
	h := hostHandle(t)
	p := newSinkProblem(t)
	attn := causalAttention(t, nil)
	refusedAs := func(err error, prefix string) {
		t.Helper()
		e := asError(t, err)
		if e.FromLibrary || e.Status != StatusBadParam || !strings.HasPrefix(e.Message, prefix) {
			t.Errorf("want a refusal starting %q, got %v (from library: %v)", prefix, e, e.FromLibrary)
		}
	}
	refusedAs(attn.SetSinks(nil), "sinks: ")

	// Three sinks for four heads: the library would read past them.
	if err := attn.SetSinks(p.sinks[:3]); err != nil {
		t.Fatal(err)
	}
	o := filled(len(p.qd))
	err := h.Forward(attn, nil, F32(p.q, p.qd), F32(p.kv, p.kd), F32(p.kv, p.vd), F32(p.q, o), nil)
	refusedAs(err, "sinks: ")
	if e := asError(t, err); !strings.Contains(e.Message, "3") || !strings.Contains(e.Message, "4") {
		t.Errorf("the message names neither count: %v", e)
	}

	// A device pointer (here another descriptor's C copy, so that nothing bad happens if it were read): a HOST
	// operation cannot know how many floats are behind it.
	other := causalAttention(t, p.sinks)
	address, _ := other.Sinks()
	if err := attn.SetSinksDevice(address); err != nil {
		t.Fatal(err)
	}
	if ptr, _ := attn.Sinks(); ptr != address {
		t.Errorf("Sinks() %#x after SetSinksDevice(%#x)", ptr, address)
	}
	refusedAs(h.DecodeChunk(attn, nil, F32(p.q, p.qd), F32(p.kv, p.kd), F32(p.kv, p.vd), F32(p.q, o), nil, 0),
		"attn: ")
	if !untouched(o) {
		t.Error("a refused call wrote its output")
	}

	// dSinks: too few floats for the heads, or device memory, is refused; without sinks the library refuses.
	if err := attn.SetSinks(p.sinks); err != nil {
		t.Fatal(err)
	}
	dq, dk, dv := filled(len(p.qd)), filled(len(p.kd)), filled(len(p.vd))
	backward := func(a *AttentionDescriptor) error {
		return h.Backward(a, nil, F32(p.q, p.qd), F32(p.kv, p.kd), F32(p.kv, p.vd), F32(p.q, p.qd),
			F32(p.q, p.dOd), F32(p.lse, make([]float32, snB*snH*snSQ)), F32(p.q, dq), F32(p.kv, dk), F32(p.kv, dv))
	}
	if err := attn.EnableSinksGradient(snH - 1); err != nil {
		t.Fatal(err)
	}
	refusedAs(backward(attn), "dSinks: ")
	if err := attn.SetSinksGradientDevice(address); err != nil {
		t.Fatal(err)
	}
	if ptr, _ := attn.SinksGradientPointer(); ptr != address || attn.SinksGradient() != nil {
		t.Errorf("SinksGradientPointer() %#x after SetSinksGradientDevice(%#x)", ptr, address)
	}
	refusedAs(backward(attn), "attn: ")

	noSinks := causalAttention(t, nil)
	if err := noSinks.EnableSinksGradient(snH); err != nil {
		t.Fatal(err)
	}
	if e := asError(t, backward(noSinks)); !e.FromLibrary || e.Status != StatusBadParam {
		t.Errorf("dSinks without sinks: %v (from library: %v), want the library's BAD_PARAM", e, e.FromLibrary)
	}
	if !untouched(dq) || !untouched(dk) || !untouched(dv) {
		t.Error("a refused backward wrote its gradients")
	}
}
