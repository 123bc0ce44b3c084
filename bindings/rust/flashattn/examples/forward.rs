// Causal grouped-query attention on the HOST backend, checked against attention written out in f64.
use flashattn::{AttentionDescriptor, DataType, Handle, Input, Mask, Output, TensorDescriptor};

fn main() -> Result<(), flashattn::Error> {
    // Q and O [batch 2, 4 heads, 3 queries, head dim 8]; K and V [2, 2 KV heads, 5 keys, 8], packed row-major.
    let (b, h, hk, sq, sk, d) = (2usize, 4usize, 2usize, 3usize, 5usize, 8usize);
    let q_desc = TensorDescriptor::contiguous(DataType::Fp32, &[b as i64, h as i64, sq as i64, d as i64])?;
    let kv_desc = TensorDescriptor::contiguous(DataType::Fp32, &[b as i64, hk as i64, sk as i64, d as i64])?;
    let lse_desc = TensorDescriptor::contiguous(DataType::Fp32, &[b as i64, h as i64, sq as i64])?;
    let q: Vec<f32> = (0..b * h * sq * d).map(|i| (0.7 * i as f32).sin()).collect();
    let k: Vec<f32> = (0..b * hk * sk * d).map(|i| (0.3 * i as f32 + 1.0).cos()).collect();
    let v: Vec<f32> = (0..b * hk * sk * d).map(|i| (0.5 * i as f32 + 2.0).sin()).collect();
    let mut o = vec![0.0f32; q.len()];
    let mut lse = vec![0.0f32; b * h * sq];

    let mut attn = AttentionDescriptor::new()?;
    attn.set_mask(Mask::CausalBottomRight)?;
    let mut handle = Handle::with_backend(flashattn::Backend::Host)?;
    handle.forward(
        Some(&attn),
        None,
        Input::new(&q_desc, &q),
        Input::new(&kv_desc, &k),
        Input::new(&kv_desc, &v),
        Output::new(&q_desc, &mut o),
        Some(Output::new(&lse_desc, &mut lse)),
    )?;

    // Reference: query i sees keys j <= i + (sk - sq); query head hq reads KV head hq / (h / hk).
    let scale = 1.0 / (d as f64).sqrt();
    let mut max_error = 0.0f64;
    for bi in 0..b {
        for hq in 0..h {
            let kh = hq / (h / hk);
            for i in 0..sq {
                let row = ((bi * h + hq) * sq + i) * d;
                let visible = i + (sk - sq) + 1;
                let logits: Vec<f64> = (0..visible)
                    .map(|j| {
                        let key = ((bi * hk + kh) * sk + j) * d;
                        scale * (0..d).map(|x| q[row + x] as f64 * k[key + x] as f64).sum::<f64>()
                    })
                    .collect();
                let max = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = logits.iter().map(|l| (l - max).exp()).sum();
                let ref_lse = max + sum.ln();
                max_error = max_error.max((lse[(bi * h + hq) * sq + i] as f64 - ref_lse).abs());
                for x in 0..d {
                    let out: f64 = (0..visible)
                        .map(|j| (logits[j] - ref_lse).exp() * v[((bi * hk + kh) * sk + j) * d + x] as f64)
                        .sum();
                    max_error = max_error.max((o[row + x] as f64 - out).abs());
                }
            }
        }
    }
    let ok = max_error <= 1e-5;
    println!("forward on HOST: o[0..4] = {:?}", &o[..4]);
    println!("max |error| against the f64 reference = {:.3e} (tolerance 1e-5): {}", max_error, if ok { "OK" } else { "FAILED" });
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
