//! Attention sinks through the safe interface on a HOST handle: forward and decode against attention with sinks
//! written out in f64 here, dSinks from `backward_with_sinks_gradient` against its formula, and what is refused
//! before the library is called. The shared vectors (`vectors.rs`) check the same against the project's oracle.

use flashattn::{AttentionDescriptor, Backend, DataType, Handle, Input, Mask, Output, Status, TensorDescriptor};

const CANARY: f32 = 7.25;
const B: usize = 2;
const H: usize = 4;
const HK: usize = 2;
const SQ: usize = 5;
const SK: usize = 3;
const D: usize = 8;

/// Q, O, dO [2, 4, 5, 8] and K, V [2, 2, 3, 8], packed row-major. With the bottom-right causal mask and more
/// queries than keys, rows 0 and 1 of every head see no key: the sink is all their softmax.
struct Problem {
    q_desc: TensorDescriptor,
    kv_desc: TensorDescriptor,
    lse_desc: TensorDescriptor,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    d_o: Vec<f32>,
    sinks: Vec<f32>,
}

fn problem() -> Problem {
    let q_desc = TensorDescriptor::contiguous(DataType::Fp32, &[B as i64, H as i64, SQ as i64, D as i64]).unwrap();
    let kv_desc = TensorDescriptor::contiguous(DataType::Fp32, &[B as i64, HK as i64, SK as i64, D as i64]).unwrap();
    let lse_desc = TensorDescriptor::contiguous(DataType::Fp32, &[B as i64, H as i64, SQ as i64]).unwrap();
    let nq = B * H * SQ * D;
    let nk = B * HK * SK * D;
    Problem {
        q_desc,
        kv_desc,
        lse_desc,
        q: (0..nq).map(|i| (0.37 * i as f32).sin()).collect(),
        k: (0..nk).map(|i| (0.11 * i as f32 + 0.5).cos()).collect(),
        v: (0..nk).map(|i| (0.23 * i as f32).sin()).collect(),
        d_o: (0..nq).map(|i| (0.19 * i as f32 + 1.0).cos()).collect(),
        // Near the logits (|q.k| / sqrt(8) < 1.5), one far above them, one far below.
        sinks: vec![0.4, -6.0, 1.1, 5.0],
    }
}

fn host() -> Handle {
    Handle::with_backend(Backend::Host).unwrap()
}

fn causal_with_sinks(sinks: &[f32]) -> AttentionDescriptor {
    let mut attn = AttentionDescriptor::new().unwrap();
    attn.set_mask(Mask::CausalBottomRight).unwrap();
    attn.set_sinks(sinks).unwrap();
    attn
}

/// O and LSE in f64: row i sees keys j <= i + SK - SQ, and exp(sink) joins its denominator.
fn reference(p: &Problem) -> (Vec<f64>, Vec<f64>) {
    let scale = 1.0 / (D as f64).sqrt();
    let mut o = vec![0.0f64; B * H * SQ * D];
    let mut lse = vec![0.0f64; B * H * SQ];
    for b in 0..B {
        for h in 0..H {
            let kh = h / (H / HK);
            for i in 0..SQ {
                let row = (b * H + h) * SQ + i;
                let visible = (i + SK).saturating_sub(SQ - 1).min(SK);
                let logits: Vec<f64> = (0..visible)
                    .map(|j| {
                        let key = ((b * HK + kh) * SK + j) * D;
                        scale * (0..D).map(|x| p.q[row * D + x] as f64 * p.k[key + x] as f64).sum::<f64>()
                    })
                    .collect();
                let sink = p.sinks[h] as f64;
                let max = logits.iter().cloned().fold(sink, f64::max);
                let sum = (sink - max).exp() + logits.iter().map(|l| (l - max).exp()).sum::<f64>();
                lse[row] = max + sum.ln();
                for x in 0..D {
                    o[row * D + x] = (0..visible)
                        .map(|j| (logits[j] - lse[row]).exp() * p.v[((b * HK + kh) * SK + j) * D + x] as f64)
                        .sum();
                }
            }
        }
    }
    (o, lse)
}

fn max_error(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    got.iter().zip(want).map(|(&g, &w)| (g as f64 - w).abs()).fold(0.0, f64::max)
}

/// Forward with sinks: O and LSE as the HOST backend stores them.
fn forward(p: &Problem, attn: &AttentionDescriptor) -> (Vec<f32>, Vec<f32>) {
    let mut o = vec![f32::NAN; p.q.len()];
    let mut lse = vec![f32::NAN; B * H * SQ];
    host()
        .forward(Some(attn), None, Input::new(&p.q_desc, &p.q), Input::new(&p.kv_desc, &p.k),
                 Input::new(&p.kv_desc, &p.v), Output::new(&p.q_desc, &mut o),
                 Some(Output::new(&p.lse_desc, &mut lse)))
        .unwrap();
    (o, lse)
}

#[test]
fn forward_and_decode_with_sinks_match_attention_written_out_in_f64() {
    let p = problem();
    let attn = causal_with_sinks(&p.sinks);
    let (o, lse) = forward(&p, &attn);
    let (ref_o, ref_lse) = reference(&p);
    assert!(max_error(&o, &ref_o) <= 1e-5, "o: max error {:e}", max_error(&o, &ref_o));
    assert!(max_error(&lse, &ref_lse) <= 1e-5, "lse: max error {:e}", max_error(&lse, &ref_lse));
    for b in 0..B {
        for h in 0..H {
            for i in 0..2 {
                let row = (b * H + h) * SQ + i;
                assert_eq!(lse[row], p.sinks[h], "a row without keys has LSE = its sink");
                assert!(o[row * D..(row + 1) * D].iter().all(|&x| x == 0.0), "a row without keys has O = 0");
            }
        }
    }
    // The sinks are not a no-op here: without them the rows that see keys differ by far more than the tolerance.
    let mut plain = AttentionDescriptor::new().unwrap();
    plain.set_mask(Mask::CausalBottomRight).unwrap();
    let (o_plain, _) = forward(&p, &plain);
    assert!(max_error(&o_plain, &ref_o) > 1e-2);

    // The decode adds each sink once, after its chunks are folded: the same result whatever the chunk count.
    for chunks in [1, 2, 3] {
        let mut od = vec![f32::NAN; p.q.len()];
        let mut lsed = vec![f32::NAN; B * H * SQ];
        host()
            .decode_chunk(Some(&attn), None, Input::new(&p.q_desc, &p.q), Input::new(&p.kv_desc, &p.k),
                          Input::new(&p.kv_desc, &p.v), Output::new(&p.q_desc, &mut od),
                          Some(Output::new(&p.lse_desc, &mut lsed)), chunks)
            .unwrap();
        assert!(max_error(&od, &ref_o) <= 1e-5, "decode in {} chunks: o off by {:e}", chunks, max_error(&od, &ref_o));
        assert!(max_error(&lsed, &ref_lse) <= 1e-5, "decode in {} chunks: lse", chunks);
    }
}

#[test]
fn the_descriptor_keeps_its_own_copy_of_the_sinks() {
    let p = problem();
    let mut sinks = p.sinks.clone();
    let mut attn = AttentionDescriptor::new().unwrap();
    assert!(attn.sinks().unwrap().is_null());
    attn.set_mask(Mask::CausalBottomRight).unwrap();
    attn.set_sinks(&sinks).unwrap();
    let held = attn.sinks().unwrap();
    assert!(!held.is_null() && held != sinks.as_ptr());
    // Changing or freeing the caller's vector afterwards changes nothing.
    sinks.iter_mut().for_each(|s| *s = f32::NAN);
    drop(sinks);
    let (_, lse) = forward(&p, &attn);
    assert_eq!(lse[0], p.sinks[0]);
    attn.clear_sinks().unwrap();
    assert!(attn.sinks().unwrap().is_null());
}

#[test]
fn backward_with_sinks_gradient_writes_dsinks() {
    let p = problem();
    let mut attn = causal_with_sinks(&p.sinks);
    attn.set_deterministic(true).unwrap();
    let (o, lse) = forward(&p, &attn);

    // dSinks[h] = -sum over the batch and the rows of head h of exp(s_h - LSE) (dO . O), from the O and LSE the
    // backward is given.
    let mut want = vec![0.0f64; H];
    for b in 0..B {
        for (h, w) in want.iter_mut().enumerate() {
            for i in 0..SQ {
                let row = (b * H + h) * SQ + i;
                let dot: f64 = (0..D).map(|x| p.d_o[row * D + x] as f64 * o[row * D + x] as f64).sum();
                *w -= (p.sinks[h] as f64 - lse[row] as f64).exp() * dot;
            }
        }
    }
    assert!(want.iter().all(|w| w.abs() > 1e-3), "every head's dSinks is far from 0: {:?}", want);

    let run = |attn: &mut AttentionDescriptor, d_sinks: &mut [f32]| {
        let mut dq = vec![f32::NAN; p.q.len()];
        let mut dk = vec![f32::NAN; p.k.len()];
        let mut dv = vec![f32::NAN; p.v.len()];
        host()
            .backward_with_sinks_gradient(attn, None, Input::new(&p.q_desc, &p.q), Input::new(&p.kv_desc, &p.k),
                                          Input::new(&p.kv_desc, &p.v), Input::new(&p.q_desc, &o),
                                          Input::new(&p.q_desc, &p.d_o), Input::new(&p.lse_desc, &lse),
                                          Output::new(&p.q_desc, &mut dq), Output::new(&p.kv_desc, &mut dk),
                                          Output::new(&p.kv_desc, &mut dv), d_sinks)
            .unwrap();
        assert!(dq.iter().chain(&dk).chain(&dv).all(|x| x.is_finite()));
        dq
    };
    let mut d_sinks = vec![f32::NAN; H];
    let dq = run(&mut attn, &mut d_sinks);
    assert!(max_error(&d_sinks, &want) <= 1e-5, "dsinks {:?}, expected {:?}", d_sinks, want);
    // Lent for the call only: the descriptor no longer points at the slice.
    assert!(attn.sinks_gradient().unwrap().is_null());

    // Overwritten, never accumulated into, and bitwise deterministic.
    let mut again = vec![1.0e3f32; H];
    run(&mut attn, &mut again);
    assert_eq!(again.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
               d_sinks.iter().map(|x| x.to_bits()).collect::<Vec<_>>());

    // The plain backward gives the same gradients of Q, K and V.
    let mut dq_plain = vec![f32::NAN; p.q.len()];
    let mut dk = vec![f32::NAN; p.k.len()];
    let mut dv = vec![f32::NAN; p.v.len()];
    host()
        .backward(Some(&attn), None, Input::new(&p.q_desc, &p.q), Input::new(&p.kv_desc, &p.k),
                  Input::new(&p.kv_desc, &p.v), Input::new(&p.q_desc, &o), Input::new(&p.q_desc, &p.d_o),
                  Input::new(&p.lse_desc, &lse), Output::new(&p.q_desc, &mut dq_plain),
                  Output::new(&p.kv_desc, &mut dk), Output::new(&p.kv_desc, &mut dv))
        .unwrap();
    assert_eq!(dq_plain, dq);
}

#[test]
fn sinks_the_operation_cannot_use_are_refused_before_the_call() {
    let p = problem();
    let mut attn = AttentionDescriptor::new().unwrap();
    let err = attn.set_sinks(&[]).unwrap_err();
    assert!(!err.from_library() && err.message().starts_with("sinks: "), "{}", err);
    assert!(attn.sinks().unwrap().is_null());

    // Three sinks for four heads: the library would read past them.
    attn.set_sinks(&p.sinks[..3]).unwrap();
    let mut o = vec![CANARY; p.q.len()];
    let err = host()
        .forward(Some(&attn), None, Input::new(&p.q_desc, &p.q), Input::new(&p.kv_desc, &p.k),
                 Input::new(&p.kv_desc, &p.v), Output::new(&p.q_desc, &mut o), None)
        .unwrap_err();
    assert_eq!(err.status(), Status::BadParam);
    assert!(!err.from_library());
    assert!(err.message().starts_with("sinks: ") && err.message().contains('3') && err.message().contains('4'),
            "{}", err);
    assert!(o.iter().all(|&x| x == CANARY));

    // Sinks in "device" memory: a HOST operation cannot know how many floats are behind the pointer.
    let device = p.sinks.clone();
    unsafe { attn.set_sinks_device(device.as_ptr()).unwrap() };
    assert_eq!(attn.sinks().unwrap(), device.as_ptr());
    let err = host()
        .decode_chunk(Some(&attn), None, Input::new(&p.q_desc, &p.q), Input::new(&p.kv_desc, &p.k),
                      Input::new(&p.kv_desc, &p.v), Output::new(&p.q_desc, &mut o), None, 0)
        .unwrap_err();
    assert!(!err.from_library() && err.message().starts_with("attn: "), "{}", err);
    assert!(o.iter().all(|&x| x == CANARY));
    unsafe { attn.set_sinks_device(std::ptr::null()).unwrap() };
    assert!(attn.sinks().unwrap().is_null());
}

#[test]
fn a_sinks_gradient_the_backward_cannot_write_is_refused() {
    let p = problem();
    let o = vec![0.5f32; p.q.len()];
    let lse = vec![1.0f32; B * H * SQ];
    let mut dq = vec![CANARY; p.q.len()];
    let attempt = |attn: &mut AttentionDescriptor, d_sinks: &mut [f32], dq: &mut [f32]| {
        let (mut dk, mut dv) = (vec![CANARY; p.k.len()], vec![CANARY; p.v.len()]);
        host().backward_with_sinks_gradient(attn, None, Input::new(&p.q_desc, &p.q), Input::new(&p.kv_desc, &p.k),
                                            Input::new(&p.kv_desc, &p.v), Input::new(&p.q_desc, &o),
                                            Input::new(&p.q_desc, &p.d_o), Input::new(&p.lse_desc, &lse),
                                            Output::new(&p.q_desc, dq), Output::new(&p.kv_desc, &mut dk),
                                            Output::new(&p.kv_desc, &mut dv), d_sinks)
    };

    // Too short for the heads: refused here, by name.
    let mut attn = causal_with_sinks(&p.sinks);
    let mut short = vec![CANARY; H - 1];
    let err = attempt(&mut attn, &mut short, &mut dq).unwrap_err();
    assert!(!err.from_library() && err.message().starts_with("d_sinks: "), "{}", err);
    assert!(short.iter().chain(&dq).all(|&x| x == CANARY));

    // No sinks to differentiate: the library refuses, and the descriptor is left as it was.
    let mut no_sinks = AttentionDescriptor::new().unwrap();
    let mut d_sinks = vec![CANARY; H];
    let err = attempt(&mut no_sinks, &mut d_sinks, &mut dq).unwrap_err();
    assert_eq!(err.status(), Status::BadParam);
    assert!(err.from_library(), "{}", err);
    assert!(d_sinks.iter().chain(&dq).all(|&x| x == CANARY));
    assert!(no_sinks.sinks_gradient().unwrap().is_null());

    // A device dSinks pointer is for CUDA backwards: the plain HOST backward refuses to write through it, and
    // backward_with_sinks_gradient lends its slice for the call and puts the device pointer back afterwards.
    let mut device = vec![CANARY; H];
    unsafe { attn.set_sinks_gradient_device(device.as_mut_ptr()).unwrap() };
    assert_eq!(attn.sinks_gradient().unwrap(), device.as_mut_ptr());
    let (mut dk, mut dv) = (vec![CANARY; p.k.len()], vec![CANARY; p.v.len()]);
    let err = host()
        .backward(Some(&attn), None, Input::new(&p.q_desc, &p.q), Input::new(&p.kv_desc, &p.k),
                  Input::new(&p.kv_desc, &p.v), Input::new(&p.q_desc, &o), Input::new(&p.q_desc, &p.d_o),
                  Input::new(&p.lse_desc, &lse), Output::new(&p.q_desc, &mut dq), Output::new(&p.kv_desc, &mut dk),
                  Output::new(&p.kv_desc, &mut dv))
        .unwrap_err();
    assert!(dq.iter().all(|&x| x == CANARY));
    assert!(!err.from_library() && err.message().starts_with("attn: "), "{}", err);
    attempt(&mut attn, &mut d_sinks, &mut dq).unwrap();
    assert!(d_sinks.iter().all(|x| x.is_finite() && *x != CANARY));
    assert!(device.iter().all(|&x| x == CANARY), "the device pointer was written by a HOST backward");
    assert_eq!(attn.sinks_gradient().unwrap(), device.as_mut_ptr());
    attn.clear_sinks_gradient().unwrap();
    assert!(attn.sinks_gradient().unwrap().is_null());
}
