package flashattn

// Every shared test vector (bindings/testdata/*.json, format in its README) runs through the binding on a HOST
// handle with its outputs poisoned (NaN) first, and must pass the vector's gates. FLASHATTN_TESTDATA overrides the
// folder.
//
// Each vector runs twice: through the slice operations, and through the Device operations given host addresses,
// which a HOST handle takes as its own memory. No GPU is needed for the second pass, and it checks that the
// pointer wrappers pass every argument in its place.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"unsafe"
)

type vecTensor struct {
	Dims    []int64       `json:"dims"`
	Strides []int64       `json:"strides"`
	RawData []interface{} `json:"data"`
}

type vector struct {
	Name      string `json:"name"`
	Op        string `json:"op"`
	DType     string `json:"dtype"`
	Attention *struct {
		Scale         json.Number `json:"scale"`
		Mask          string      `json:"mask"`
		Window        [2]int64    `json:"window"`
		Softcap       json.Number `json:"softcap"`
		Deterministic int         `json:"deterministic"`
	} `json:"attention"`
	Seq *struct {
		KvLengths []int32 `json:"kv_lengths"`
		Ragged    *struct {
			CuSeqlensQ []int32 `json:"cu_seqlens_q"`
			CuSeqlensK []int32 `json:"cu_seqlens_k"`
			MaxQ       int64   `json:"max_q"`
			MaxK       int64   `json:"max_k"`
		} `json:"ragged"`
		Paged *struct {
			BlockTable [][]int32 `json:"block_table"`
			PageSize   int64     `json:"page_size"`
		} `json:"paged"`
	} `json:"seq"`
	Chunks   int32                 `json:"chunks"`
	Inputs   map[string]*vecTensor `json:"inputs"`
	Expected map[string]*vecTensor `json:"expected"`
	Gates    map[string]struct {
		MaxAbs   float64  `json:"max_abs"`
		Normwise *float64 `json:"normwise"`
	} `json:"gates"`
}

func testdataDir() string {
	if d := os.Getenv("FLASHATTN_TESTDATA"); d != "" {
		return d
	}
	return filepath.Join("..", "testdata")
}

// value reads a vector number, or one of the strings the format uses for non-finite values; bits is 32 for inputs
// (printed as float32 in their shortest form) and 64 for expected values.
func value(v interface{}, bits int) float64 {
	switch x := v.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(x), bits)
		if err != nil {
			panic(err)
		}
		return f
	case string:
		switch x {
		case "inf":
			return math.Inf(1)
		case "-inf":
			return math.Inf(-1)
		case "nan":
			return math.NaN()
		}
	}
	panic(fmt.Sprintf("unexpected tensor value %#v", v))
}

func loadVector(t *testing.T, path string) *vector {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v vector
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &v
}

func descriptorOf(t *testing.T, vt *vecTensor) *TensorDescriptor {
	t.Helper()
	d, err := NewTensorDescriptor(DataFP32, vt.Dims, vt.Strides)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func elementCount(dims []int64) int {
	n := 1
	for _, d := range dims {
		n *= int(d)
	}
	return n
}

// gateProblems applies the gates of the vectors' README: finite outputs (exactly -inf where expected), max_abs over
// the finite expected elements, and normwise where given.
func gateProblems(name, tensor string, out []float32, expected *vecTensor, maxAbs float64, normwise *float64) []string {
	var problems []string
	var maxErr, diff2, ref2 float64
	for i, raw := range expected.RawData {
		w := value(raw, 64)
		o := float64(out[i])
		if math.IsInf(w, -1) {
			if !math.IsInf(o, -1) {
				problems = append(problems, fmt.Sprintf("%s %s[%d] = %g, expected -inf", name, tensor, i, o))
			}
			continue
		}
		if math.IsNaN(o) || math.IsInf(o, 0) {
			problems = append(problems, fmt.Sprintf("%s %s[%d] = %g is not finite (expected %g)", name, tensor, i, o, w))
			continue
		}
		maxErr = math.Max(maxErr, math.Abs(o-w))
		diff2 += (o - w) * (o - w)
		ref2 += w * w
	}
	if maxErr > maxAbs {
		problems = append(problems, fmt.Sprintf("%s %s: max |out - expected| = %g > %g", name, tensor, maxErr, maxAbs))
	}
	if normwise != nil {
		rel := math.Sqrt(diff2)
		if ref2 > 0 {
			rel = math.Sqrt(diff2 / ref2)
		}
		if rel > *normwise {
			problems = append(problems, fmt.Sprintf("%s %s: normwise error %g > %g", name, tensor, rel, *normwise))
		}
	}
	return problems
}

func runVector(t *testing.T, h *Handle, v *vector, viaPointers bool) []string {
	if v.DType != "fp32" {
		t.Fatalf("%s: only FP32 vectors are defined, got %s", v.Name, v.DType)
	}
	in := map[string]HostTensor{}
	inData := map[string][]float32{}
	for name, vt := range v.Inputs {
		data := make([]float32, len(vt.RawData))
		for i, raw := range vt.RawData {
			data[i] = float32(value(raw, 32))
		}
		if len(data) != elementCount(vt.Dims) {
			t.Fatalf("%s: input %s has %d values for dims %v", v.Name, name, len(data), vt.Dims)
		}
		in[name] = F32(descriptorOf(t, vt), data)
		inData[name] = data
	}
	outData := map[string][]float32{}
	out := map[string]HostTensor{}
	for name, vt := range v.Expected {
		data := make([]float32, elementCount(vt.Dims))
		for i := range data {
			data[i] = float32(math.NaN())
		}
		outData[name] = data
		out[name] = F32(descriptorOf(t, vt), data)
	}
	var attn *AttentionDescriptor
	if a := v.Attention; a != nil {
		var err error
		if attn, err = NewAttentionDescriptor(); err != nil {
			t.Fatal(err)
		}
		defer attn.Close()
		mask := map[string]MaskMode{"none": MaskNone, "causal_top_left": MaskCausalTopLeft,
			"causal_bottom_right": MaskCausalBottomRight}[a.Mask]
		for _, err := range []error{attn.SetScale(float32(value(a.Scale, 32))), attn.SetMask(mask),
			attn.SetWindow(a.Window[0], a.Window[1]), attn.SetSoftcap(float32(value(a.Softcap, 32))),
			attn.SetDeterministic(a.Deterministic != 0)} {
			if err != nil {
				t.Fatalf("%s: %v", v.Name, err)
			}
		}
	}
	// Sinks and dSinks belong to the attention descriptor. The slice pass gives it a C copy of the sinks and C
	// memory for dSinks; the pointer pass the Go slices' own addresses, which in and out keep alive (and the Go heap
	// keeps in place) until the descriptor is closed.
	_, wantDSinks := v.Expected["dsinks"]
	if _, ok := v.Inputs["sinks"]; ok || wantDSinks {
		if attn == nil {
			t.Fatalf("%s: sinks without an attention descriptor", v.Name)
		}
		var errs []error
		if ok && viaPointers {
			errs = append(errs, attn.SetSinksDevice(uintptr(in["sinks"].ptr)))
		} else if ok {
			errs = append(errs, attn.SetSinks(inData["sinks"]))
		}
		if wantDSinks && viaPointers {
			errs = append(errs, attn.SetSinksGradientDevice(uintptr(out["dsinks"].ptr)))
		} else if wantDSinks {
			errs = append(errs, attn.EnableSinksGradient(len(outData["dsinks"])))
		}
		for _, err := range errs {
			if err != nil {
				t.Fatalf("%s: %v", v.Name, err)
			}
		}
	}
	var seq *SeqDescriptor
	if s := v.Seq; s != nil {
		var err error
		if seq, err = NewSeqDescriptor(); err != nil {
			t.Fatal(err)
		}
		defer seq.Close()
		if r := s.Ragged; r != nil {
			if err := seq.SetRagged(r.CuSeqlensQ, r.CuSeqlensK, r.MaxQ, r.MaxK); err != nil {
				t.Fatalf("%s: %v", v.Name, err)
			}
		}
		if s.KvLengths != nil {
			if err := seq.SetKvLengths(s.KvLengths); err != nil {
				t.Fatalf("%s: %v", v.Name, err)
			}
		}
		if p := s.Paged; p != nil {
			var table []int32
			for _, row := range p.BlockTable {
				if len(row) != len(p.BlockTable[0]) {
					t.Fatalf("%s: block table rows differ in length", v.Name)
				}
				table = append(table, row...)
			}
			if err := seq.SetPaged(table, int64(len(p.BlockTable[0]))); err != nil {
				t.Fatalf("%s: %v", v.Name, err)
			}
		}
	}
	optOut := func(name string) *HostTensor {
		if o, ok := out[name]; ok {
			return &o
		}
		return nil
	}
	var err error
	if viaPointers {
		err = runVectorViaPointers(t, h, v, attn, seq, in, out)
	} else {
		err = runVectorViaSlices(h, v, attn, seq, in, out, optOut)
	}
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", v.Name, err)}
	}
	if wantDSinks && !viaPointers {
		copy(outData["dsinks"], attn.SinksGradient())
	}
	var problems []string
	for name, vt := range v.Expected {
		g, ok := v.Gates[name]
		if !ok {
			t.Fatalf("%s: no gate for %s", v.Name, name)
		}
		problems = append(problems, gateProblems(v.Name, name, outData[name], vt, g.MaxAbs, g.Normwise)...)
	}
	return problems
}

func runVectorViaSlices(h *Handle, v *vector, attn *AttentionDescriptor, seq *SeqDescriptor,
	in, out map[string]HostTensor, optOut func(string) *HostTensor) error {
	var err error
	switch v.Op {
	case "forward":
		err = h.Forward(attn, seq, in["q"], in["k"], in["v"], out["o"], optOut("lse"))
	case "decode":
		err = h.DecodeChunk(attn, seq, in["q"], in["k"], in["v"], out["o"], optOut("lse"), v.Chunks)
	case "backward":
		err = h.Backward(attn, seq, in["q"], in["k"], in["v"], in["o"], in["do"], in["lse"], out["dq"], out["dk"],
			out["dv"])
	case "merge":
		err = h.MergeStates(in["partial_o"], in["partial_lse"], out["o"], optOut("lse"))
	default:
		err = fmt.Errorf("unknown op %q", v.Op)
	}
	return err
}

// runVectorViaPointers passes the Go slices' addresses as uintptr. The slices stay referenced by in and out (and the
// workspace by ws) until the call returns, and the Go heap does not move, so the addresses stay valid.
func runVectorViaPointers(t *testing.T, h *Handle, v *vector, attn *AttentionDescriptor, seq *SeqDescriptor,
	in, out map[string]HostTensor) error {
	dev := func(ht HostTensor) DeviceTensor { return DeviceTensor{Desc: ht.Desc, Ptr: uintptr(ht.ptr)} }
	var lse *DeviceTensor
	if l, ok := out["lse"]; ok {
		d := dev(l)
		lse = &d
	}
	lseDesc := func() *TensorDescriptor {
		if lse == nil {
			return nil
		}
		return lse.Desc
	}()
	var ws []byte
	workspace := func(n int, err error) (uintptr, int) {
		if err != nil {
			t.Fatalf("%s: workspace size: %v", v.Name, err)
		}
		ws = make([]byte, n+256)
		base := uintptr(unsafe.Pointer(&ws[0]))
		return base + (256-base%256)%256, n
	}
	defer func() { _ = ws }()
	switch v.Op {
	case "forward":
		p, n := workspace(h.ForwardWorkspaceSize(attn, seq, in["q"].Desc, in["k"].Desc, in["v"].Desc, out["o"].Desc, lseDesc))
		return h.ForwardDevice(attn, seq, dev(in["q"]), dev(in["k"]), dev(in["v"]), dev(out["o"]), lse, p, n)
	case "decode":
		p, n := workspace(h.DecodeChunkWorkspaceSize(attn, seq, in["q"].Desc, in["k"].Desc, in["v"].Desc, out["o"].Desc,
			lseDesc, v.Chunks))
		return h.DecodeChunkDevice(attn, seq, dev(in["q"]), dev(in["k"]), dev(in["v"]), dev(out["o"]), lse, v.Chunks, p, n)
	case "backward":
		p, n := workspace(h.BackwardWorkspaceSize(attn, seq, in["q"].Desc, in["k"].Desc, in["v"].Desc, in["o"].Desc,
			in["lse"].Desc))
		return h.BackwardDevice(attn, seq, dev(in["q"]), dev(in["k"]), dev(in["v"]), dev(in["o"]), dev(in["do"]),
			dev(in["lse"]), dev(out["dq"]), dev(out["dk"]), dev(out["dv"]), p, n)
	case "merge":
		p, n := workspace(h.MergeStatesWorkspaceSize(in["partial_o"].Desc, in["partial_lse"].Desc, out["o"].Desc, lseDesc))
		return h.MergeStatesDevice(dev(in["partial_o"]), dev(in["partial_lse"]), dev(out["o"]), lse, p, n)
	}
	return fmt.Errorf("unknown op %q", v.Op)
}

func TestVectorsPassTheirGatesOnHost(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(testdataDir(), "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no vectors in %s (%v)", testdataDir(), err)
	}
	sort.Strings(files)
	h, err := NewHandleWithBackend(BackendHost)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ops := map[string]bool{}
	var problems []string
	for _, f := range files {
		v := loadVector(t, f)
		ops[v.Op] = true
		if _, ok := v.Inputs["sinks"]; ok {
			ops[v.Op+" with sinks"] = true
		}
		if _, ok := v.Expected["dsinks"]; ok {
			ops["dsinks"] = true
		}
		problems = append(problems, runVector(t, h, v, false)...)
		for _, p := range runVector(t, h, v, true) {
			problems = append(problems, "(pointers) "+p)
		}
	}
	if len(problems) > 0 {
		t.Fatalf("%d problem(s):\n  %v", len(problems), problems)
	}
	// Every operation of the format is exercised, and every one that takes sinks with them, so that no branch of the
	// runner rots unnoticed.
	for _, op := range []string{"forward", "backward", "decode", "merge", "forward with sinks", "backward with sinks",
		"decode with sinks", "dsinks"} {
		if !ops[op] {
			t.Errorf("no %s vector in %s", op, testdataDir())
		}
	}
	t.Logf("%d vectors passed", len(files))
}

func TestGatesRejectAPerturbedResult(t *testing.T) {
	v := loadVector(t, filepath.Join(testdataDir(), "forward_plain.json"))
	exp := v.Expected["o"]
	g := v.Gates["o"]
	out := make([]float32, len(exp.RawData))
	for i, raw := range exp.RawData {
		out[i] = float32(value(raw, 64))
	}
	if p := gateProblems("forward_plain", "o", out, exp, g.MaxAbs, g.Normwise); len(p) > 0 {
		t.Fatalf("the expected values fail their own gate: %v", p)
	}
	out[3] += float32(4*g.MaxAbs + 1e-3)
	if len(gateProblems("forward_plain", "o", out, exp, g.MaxAbs, g.Normwise)) == 0 {
		t.Fatal("a perturbed result passed")
	}
	out[3] = float32(math.NaN())
	if len(gateProblems("forward_plain", "o", out, exp, g.MaxAbs, g.Normwise)) == 0 {
		t.Fatal("a NaN passed")
	}
}
