// Causal grouped-query attention on the HOST backend, checked against attention written out in float64.
package main

import (
	"fmt"
	"log"
	"math"

	"flashattn"
)

func main() {
	// Q and O [batch 2, 4 heads, 3 queries, head dim 8]; K and V [2, 2 KV heads, 5 keys, 8], packed row-major.
	const b, h, hk, sq, sk, d = 2, 4, 2, 3, 5, 8
	qDesc, err := flashattn.NewContiguousTensorDescriptor(flashattn.DataFP32, []int64{b, h, sq, d})
	if err != nil {
		log.Fatal(err)
	}
	defer qDesc.Close()
	kvDesc, err := flashattn.NewContiguousTensorDescriptor(flashattn.DataFP32, []int64{b, hk, sk, d})
	if err != nil {
		log.Fatal(err)
	}
	defer kvDesc.Close()
	lseDesc, err := flashattn.NewContiguousTensorDescriptor(flashattn.DataFP32, []int64{b, h, sq})
	if err != nil {
		log.Fatal(err)
	}
	defer lseDesc.Close()

	q := make([]float32, b*h*sq*d)
	k := make([]float32, b*hk*sk*d)
	v := make([]float32, b*hk*sk*d)
	for i := range q {
		q[i] = float32(math.Sin(0.7 * float64(i)))
	}
	for i := range k {
		k[i] = float32(math.Cos(0.3*float64(i) + 1))
		v[i] = float32(math.Sin(0.5*float64(i) + 2))
	}
	o := make([]float32, len(q))
	lse := make([]float32, b*h*sq)

	attn, err := flashattn.NewAttentionDescriptor()
	if err != nil {
		log.Fatal(err)
	}
	defer attn.Close()
	if err := attn.SetMask(flashattn.MaskCausalBottomRight); err != nil {
		log.Fatal(err)
	}
	handle, err := flashattn.NewHandleWithBackend(flashattn.BackendHost)
	if err != nil {
		log.Fatal(err)
	}
	defer handle.Close()
	lseOut := flashattn.F32(lseDesc, lse)
	err = handle.Forward(attn, nil, flashattn.F32(qDesc, q), flashattn.F32(kvDesc, k), flashattn.F32(kvDesc, v),
		flashattn.F32(qDesc, o), &lseOut)
	if err != nil {
		log.Fatal(err) // a *flashattn.Error: the library's status and message
	}

	// Reference: query i sees keys j <= i + (sk - sq); query head hq reads KV head hq / (h / hk).
	scale := 1 / math.Sqrt(d)
	maxError := 0.0
	for bi := 0; bi < b; bi++ {
		for hq := 0; hq < h; hq++ {
			kh := hq / (h / hk)
			for i := 0; i < sq; i++ {
				row := ((bi*h+hq)*sq + i) * d
				visible := i + (sk - sq) + 1
				logits := make([]float64, visible)
				maxLogit := math.Inf(-1)
				for j := range logits {
					key := ((bi*hk+kh)*sk + j) * d
					for x := 0; x < d; x++ {
						logits[j] += scale * float64(q[row+x]) * float64(k[key+x])
					}
					maxLogit = math.Max(maxLogit, logits[j])
				}
				sum := 0.0
				for _, l := range logits {
					sum += math.Exp(l - maxLogit)
				}
				refLse := maxLogit + math.Log(sum)
				maxError = math.Max(maxError, math.Abs(float64(lse[(bi*h+hq)*sq+i])-refLse))
				for x := 0; x < d; x++ {
					out := 0.0
					for j, l := range logits {
						out += math.Exp(l-refLse) * float64(v[((bi*hk+kh)*sk+j)*d+x])
					}
					maxError = math.Max(maxError, math.Abs(float64(o[row+x])-out))
				}
			}
		}
	}
	verdict := "OK"
	if maxError > 1e-5 {
		verdict = "FAILED"
	}
	fmt.Printf("forward on HOST: o[0:4] = %v\n", o[:4])
	fmt.Printf("max |error| against the float64 reference = %.3e (tolerance 1e-5): %s\n", maxError, verdict)
	if verdict != "OK" {
		log.Fatal("the result is out of tolerance")
	}
}
