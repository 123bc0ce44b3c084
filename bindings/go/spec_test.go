package flashattn

// The binding must call every function of bindings/spec/flashattn_api.json, and cgo must see each with the spec's
// parameter count, types and return type; the Go constants must hold every enum value of the spec.
//
// cgo itself is the source of the declarations: `go tool cgo` translates this package's files (as `go build` does)
// and writes, for each C function the package calls, a Go stub with the parameter and result types it read from the
// header. Parsing those stubs checks what the compiled binding really links against, and lists exactly the
// functions it wraps. The spec comes from FLASHATTN_SPEC_JSON when set (CTest points it at a spec generated from the
// header being built), else from the checked-in file.
//
// C types map to cgo's as: T to _Ctype_T (int32_t, int64_t, size_t, float, char, enum and handle typedefs),
// struct S to _Ctype_struct_S, void * to unsafe.Pointer, other pointers to *T (cgo drops const). cgo spells a handle
// passed by value as the pointer it is a typedef of; that spelling is mapped back to the handle's name.

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

type specParam struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

type specFunction struct {
	Name   string      `json:"name"`
	Return string      `json:"return"`
	Params []specParam `json:"params"`
}

type spec struct {
	Version struct{ Major, Minor, Patch int64 } `json:"version"`
	Enums   []struct {
		Name   string `json:"name"`
		Values []struct {
			Name  string `json:"name"`
			Value int64  `json:"value"`
		} `json:"values"`
	} `json:"enums"`
	Handles   []string       `json:"handles"`
	Functions []specFunction `json:"functions"`
	Constants []struct {
		Name  string `json:"name"`
		Value int64  `json:"value"`
	} `json:"constants"`
}

func specPath() string {
	if p := os.Getenv("FLASHATTN_SPEC_JSON"); p != "" {
		return p
	}
	return filepath.Join("..", "spec", "flashattn_api.json")
}

func loadSpec(t *testing.T) *spec {
	t.Helper()
	data, err := os.ReadFile(specPath())
	if err != nil {
		t.Fatal(err)
	}
	var s spec
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("%s: %v", specPath(), err)
	}
	if len(s.Functions) == 0 {
		t.Fatalf("%s lists no functions", specPath())
	}
	return &s
}

// cgoType is cgo's spelling of a normalized C type of the spec.
func cgoType(c string) string {
	c = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(c), "const "))
	stars := strings.Count(c, "*")
	base := strings.TrimSpace(strings.ReplaceAll(c, "*", ""))
	if base == "void" {
		if stars == 0 {
			return ""
		}
		return strings.Repeat("*", stars-1) + "unsafe.Pointer"
	}
	if strings.HasPrefix(base, "struct ") {
		base = "struct_" + strings.TrimSpace(strings.TrimPrefix(base, "struct "))
	}
	return strings.Repeat("*", stars) + "_Ctype_" + base
}

type stub struct {
	params []string
	result string
}

// cgoStubs runs `go tool cgo` over the package's non-test files and reads the stubs of the C functions it calls.
func cgoStubs(t *testing.T, handles []string) map[string]stub {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var sources []string
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			sources = append(sources, f)
		}
	}
	// #cgo pkg-config lines are resolved by the go command, not by cgo: ask pkg-config for the same flags.
	cflags, err := exec.Command("pkg-config", "--cflags", "flashattn").Output()
	if err != nil {
		t.Fatalf("pkg-config --cflags flashattn: %v", err)
	}
	dir := t.TempDir()
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	args := append([]string{"tool", "cgo", "-objdir", dir, "-importpath", "flashattn", "--"},
		strings.Fields(string(cflags))...)
	cmd := exec.Command(goTool, append(args, sources...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go tool cgo: %v\n%s", err, out)
	}
	fset := token.NewFileSet()
	gotypes, err := parser.ParseFile(fset, filepath.Join(dir, "_cgo_gotypes.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	text := func(e ast.Expr) string {
		var b strings.Builder
		if err := printer.Fprint(&b, fset, e); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	// cgo writes a handle passed by value as the struct pointer its typedef names: map that back to the handle.
	handleOf := map[string]string{}
	isHandle := map[string]bool{}
	for _, h := range handles {
		isHandle["_Ctype_"+h] = true
	}
	for _, decl := range gotypes.Decls {
		if g, ok := decl.(*ast.GenDecl); ok && g.Tok == token.TYPE {
			for _, s := range g.Specs {
				ts := s.(*ast.TypeSpec)
				if isHandle[ts.Name.Name] {
					handleOf[text(ts.Type)] = ts.Name.Name
				}
			}
		}
	}
	normalize := func(ty string) string {
		if h, ok := handleOf[ty]; ok {
			return h
		}
		return ty
	}
	stubs := map[string]stub{}
	for _, decl := range gotypes.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || !strings.HasPrefix(fn.Name.Name, "_Cfunc_") {
			continue
		}
		name := strings.TrimPrefix(fn.Name.Name, "_Cfunc_")
		var s stub
		for _, field := range fn.Type.Params.List {
			for range field.Names {
				s.params = append(s.params, normalize(text(field.Type)))
			}
		}
		if fn.Type.Results != nil && len(fn.Type.Results.List) > 0 {
			s.result = normalize(text(fn.Type.Results.List[0].Type))
		}
		stubs[name] = s
	}
	return stubs
}

func TestCgoDeclarationsMatchTheSpec(t *testing.T) {
	s := loadSpec(t)
	stubs := cgoStubs(t, s.Handles)
	var problems []string
	inSpec := map[string]bool{}
	for _, f := range s.Functions {
		inSpec[f.Name] = true
		st, ok := stubs[f.Name]
		if !ok {
			problems = append(problems, f.Name+": the binding never calls it")
			continue
		}
		if len(st.params) != len(f.Params) {
			problems = append(problems, fmt.Sprintf("%s: %d parameters in the spec, cgo sees %d", f.Name,
				len(f.Params), len(st.params)))
		}
		for i := 0; i < len(f.Params) && i < len(st.params); i++ {
			if want := cgoType(f.Params[i].Type); want != st.params[i] {
				problems = append(problems, fmt.Sprintf("%s parameter %d (%s): spec %q (%s), cgo sees %q", f.Name, i,
					f.Params[i].Name, want, f.Params[i].Type, st.params[i]))
			}
		}
		if want := cgoType(f.Return); want != st.result {
			problems = append(problems, fmt.Sprintf("%s: returns %q in the spec (%s), cgo sees %q", f.Name, want,
				f.Return, st.result))
		}
	}
	for name := range stubs {
		if strings.HasPrefix(name, "flashAttn") && !inSpec[name] {
			problems = append(problems, name+": called by the binding but not in the spec")
		}
	}
	sort.Strings(problems)
	if len(problems) > 0 {
		t.Fatalf("the Go binding differs from %s:\n  %s", specPath(), strings.Join(problems, "\n  "))
	}
}

func TestEnumConstantsMatchTheSpec(t *testing.T) {
	s := loadSpec(t)
	want := map[string]int64{}
	for _, e := range s.Enums {
		for _, v := range e.Values {
			want[v.Name] = v.Value
		}
	}
	for _, c := range s.Constants {
		want[c.Name] = c.Value
	}
	var problems []string
	for name, v := range want {
		got, ok := enumValues[name]
		if !ok {
			problems = append(problems, name+": no Go constant")
		} else if got != v {
			problems = append(problems, fmt.Sprintf("%s: %d in the spec, %d in Go", name, v, got))
		}
	}
	for name := range enumValues {
		if _, ok := want[name]; !ok {
			problems = append(problems, name+": a Go constant the spec does not have")
		}
	}
	sort.Strings(problems)
	if len(problems) > 0 {
		t.Fatalf("the Go constants differ from %s:\n  %s", specPath(), strings.Join(problems, "\n  "))
	}
	if v := s.Version.Major*10000 + s.Version.Minor*100 + s.Version.Patch; int64(Version()) != v {
		t.Fatalf("the loaded library is version %d, the spec %d", Version(), v)
	}
}

func TestTheTypeMapReadsTheSpecForms(t *testing.T) {
	for c, want := range map[string]string{
		"const int64_t *":             "*_Ctype_int64_t",
		"const float **":              "**_Ctype_float",
		"struct CUstream_st **":       "**_Ctype_struct_CUstream_st",
		"const void *":                "unsafe.Pointer",
		"flashAttnHandle_t *":         "*_Ctype_flashAttnHandle_t",
		"flashAttnStatus_t":           "_Ctype_flashAttnStatus_t",
		"void":                        "",
		"flashAttnTensorDescriptor_t": "_Ctype_flashAttnTensorDescriptor_t",
	} {
		if got := cgoType(c); got != want {
			t.Errorf("cgoType(%q) = %q, want %q", c, got, want)
		}
	}
}
