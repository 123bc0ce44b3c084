//! Runs every shared test vector (bindings/testdata/*.json, format in its README) through the safe interface on a
//! HOST handle, with outputs poisoned (NaN) first, and applies the vector's gates. FLASHATTN_TESTDATA overrides the
//! folder.
//!
//! Each vector runs twice: through the slice operations, and through the `_device` operations given host pointers,
//! which a HOST handle takes as its own memory. No GPU is needed for the second pass, and it checks that the raw
//! pointer wrappers pass every argument in its place.

#[path = "../../testsupport/json.rs"]
mod json;

use flashattn::{
    AttentionDescriptor, Backend, DataType, DeviceInput, DeviceOutput, Handle, Input, Mask, Output, SeqDescriptor,
    TensorDescriptor,
};
use std::os::raw::c_void;
use json::Json;
use std::collections::BTreeMap;
use std::path::PathBuf;

fn testdata_dir() -> PathBuf {
    match std::env::var_os("FLASHATTN_TESTDATA") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata"),
    }
}

/// A number, or one of the strings the vectors use for non-finite values.
fn number(v: &Json) -> f64 {
    match v {
        Json::String(s) => match s.as_str() {
            "inf" => f64::INFINITY,
            "-inf" => f64::NEG_INFINITY,
            "nan" => f64::NAN,
            other => panic!("unexpected string {:?} in tensor data", other),
        },
        other => other.as_f64(),
    }
}

fn number_f32(v: &Json) -> f32 {
    match v {
        Json::String(_) => number(v) as f32,
        other => other.as_f32(),
    }
}

fn ints(v: &Json) -> Vec<i64> {
    v.as_array().iter().map(Json::as_i64).collect()
}

fn ints32(v: &Json) -> Vec<i32> {
    v.as_array().iter().map(|x| x.as_i64() as i32).collect()
}

struct Tensor {
    desc: TensorDescriptor,
    data: Vec<f32>,
}

fn dev<'a>(t: Input<'a, f32>) -> DeviceInput<'a> {
    DeviceInput { desc: t.desc, ptr: t.data.as_ptr() as *const c_void }
}

fn dev_out(t: &mut Tensor) -> DeviceOutput<'_> {
    DeviceOutput { desc: &t.desc, ptr: t.data.as_mut_ptr() as *mut c_void }
}

fn descriptor(t: &Json) -> TensorDescriptor {
    TensorDescriptor::new(DataType::Fp32, &ints(t.get("dims")), &ints(t.get("strides"))).unwrap()
}

fn input(t: &Json) -> Tensor {
    let desc = descriptor(t);
    let data: Vec<f32> = t.get("data").as_array().iter().map(number_f32).collect();
    let count: i64 = desc.dims().iter().product();
    assert_eq!(data.len() as i64, count, "data length is not the product of the dims");
    Tensor { desc, data }
}

/// An output buffer of the expected tensor's layout, poisoned so that an element the call does not write fails.
fn poisoned(t: &Json) -> Tensor {
    let desc = descriptor(t);
    let count: i64 = desc.dims().iter().product();
    Tensor { desc, data: vec![f32::NAN; count as usize] }
}

fn attention(v: &Json) -> Option<AttentionDescriptor> {
    let a = v.opt("attention")?;
    let mut attn = AttentionDescriptor::new().unwrap();
    attn.set_scale(number(a.get("scale")) as f32).unwrap();
    attn.set_mask(match a.get("mask").as_str() {
        "none" => Mask::None,
        "causal_top_left" => Mask::CausalTopLeft,
        "causal_bottom_right" => Mask::CausalBottomRight,
        other => panic!("unknown mask {}", other),
    })
    .unwrap();
    let w = ints(a.get("window"));
    attn.set_window(w[0], w[1]).unwrap();
    attn.set_softcap(number(a.get("softcap")) as f32).unwrap();
    attn.set_deterministic(a.get("deterministic").as_i64() != 0).unwrap();
    Some(attn)
}

fn sequences(v: &Json) -> Option<SeqDescriptor> {
    let s = v.opt("seq")?;
    let mut seq = SeqDescriptor::new().unwrap();
    if let Some(r) = s.opt("ragged") {
        seq.set_ragged(
            &ints32(r.get("cu_seqlens_q")),
            &ints32(r.get("cu_seqlens_k")),
            r.get("max_q").as_i64(),
            r.get("max_k").as_i64(),
        )
        .unwrap();
    }
    if let Some(l) = s.opt("kv_lengths") {
        seq.set_kv_lengths(&ints32(l)).unwrap();
    }
    if let Some(p) = s.opt("paged") {
        let rows = p.get("block_table").as_array();
        let width = rows[0].as_array().len();
        let table: Vec<i32> = rows.iter().flat_map(|r| {
            assert_eq!(r.as_array().len(), width, "block table rows differ in length");
            ints32(r)
        }).collect();
        seq.set_paged(&table, width as i64).unwrap();
    }
    Some(seq)
}

/// The gates of the vectors' README: finite outputs (exactly -inf where expected), max_abs, normwise.
fn apply_gates(name: &str, tensor: &str, out: &[f32], expected: &Json, gate: &Json) -> Vec<String> {
    let want: Vec<f64> = expected.get("data").as_array().iter().map(number).collect();
    assert_eq!(want.len(), out.len());
    let mut problems = Vec::new();
    let (mut max_err, mut diff2, mut ref2) = (0.0f64, 0.0f64, 0.0f64);
    for (i, (&o, &w)) in out.iter().zip(&want).enumerate() {
        let o = o as f64;
        if w == f64::NEG_INFINITY {
            if o != f64::NEG_INFINITY {
                problems.push(format!("{} {}[{}] = {}, expected -inf", name, tensor, i, o));
            }
            continue;
        }
        if !o.is_finite() {
            problems.push(format!("{} {}[{}] = {} is not finite (expected {})", name, tensor, i, o, w));
            continue;
        }
        max_err = max_err.max((o - w).abs());
        diff2 += (o - w) * (o - w);
        ref2 += w * w;
    }
    let max_abs = gate.get("max_abs").as_f64();
    if max_err > max_abs {
        problems.push(format!("{} {}: max |out - expected| = {:e} > {:e}", name, tensor, max_err, max_abs));
    }
    if let Some(nw) = gate.opt("normwise") {
        let rel = if ref2 > 0.0 { (diff2 / ref2).sqrt() } else { diff2.sqrt() };
        if rel > nw.as_f64() {
            problems.push(format!("{} {}: normwise error {:e} > {:e}", name, tensor, rel, nw.as_f64()));
        }
    }
    problems
}

/// A 256-byte aligned scratch buffer for the pointer pass (the slice operations size and align their own).
struct Workspace {
    buf: Vec<u8>,
}

impl Workspace {
    fn ptr(&mut self, bytes: usize) -> *mut c_void {
        self.buf = vec![0u8; bytes + 256];
        let base = self.buf.as_mut_ptr() as usize;
        (base + (256 - base % 256) % 256) as *mut c_void
    }
}

fn run_vector(handle: &mut Handle, v: &Json, via_pointers: bool) -> Vec<String> {
    let name = v.get("name").as_str();
    assert_eq!(v.get("dtype").as_str(), "fp32", "{}: only FP32 vectors are defined", name);
    let inputs: BTreeMap<String, Tensor> =
        v.get("inputs").as_object().iter().map(|(k, t)| (k.clone(), input(t))).collect();
    let expected = v.get("expected").as_object();
    let mut outputs: BTreeMap<String, Tensor> = expected.iter().map(|(k, t)| (k.clone(), poisoned(t))).collect();
    let mut attn = attention(v);
    let seq = sequences(v);
    // Sinks belong to the attention descriptor: the slice pass gives it a copy, the pointer pass the input's own
    // memory (which outlives every call below).
    if let Some(sinks) = inputs.get("sinks") {
        let a = attn.as_mut().unwrap_or_else(|| panic!("{}: sinks without an attention descriptor", name));
        if via_pointers {
            unsafe { a.set_sinks_device(sinks.data.as_ptr()).unwrap() };
        } else {
            a.set_sinks(&sinks.data).unwrap();
        }
    }
    let inp = |n: &str| {
        let t = inputs.get(n).unwrap_or_else(|| panic!("{}: no input {}", name, n));
        Input::new(&t.desc, &t.data)
    };

    // Each output is taken out of the map while the call borrows it mutably, and put back for the gates.
    let mut take = |n: &str| outputs.remove(n);
    let result;
    let mut done: Vec<(String, Tensor)> = Vec::new();
    match v.get("op").as_str() {
        "forward" | "decode" => {
            let mut o = take("o").expect("forward and decode vectors expect o");
            let mut lse = take("lse");
            let lse_out = lse.as_mut().map(|t| Output::new(&t.desc, &mut t.data));
            result = if via_pointers {
                let (a, s) = (attn.as_ref(), seq.as_ref());
                let (q, k, vv) = (dev(inp("q")), dev(inp("k")), dev(inp("v")));
                let o_out = DeviceOutput { desc: &o.desc, ptr: o.data.as_mut_ptr() as *mut c_void };
                let l_out = lse_out.map(|l| DeviceOutput { desc: l.desc, ptr: l.data.as_mut_ptr() as *mut c_void });
                let mut ws = Workspace { buf: Vec::new() };
                if v.get("op").as_str() == "forward" {
                    let n = handle.forward_workspace_size(a, s, q.desc, k.desc, vv.desc, o_out.desc,
                                                          l_out.map(|l| l.desc)).unwrap();
                    unsafe { handle.forward_device(a, s, q, k, vv, o_out, l_out, ws.ptr(n), n) }
                } else {
                    let chunks = v.get("chunks").as_i64() as i32;
                    let n = handle.decode_chunk_workspace_size(a, s, q.desc, k.desc, vv.desc, o_out.desc,
                                                               l_out.map(|l| l.desc), chunks).unwrap();
                    unsafe { handle.decode_chunk_device(a, s, q, k, vv, o_out, l_out, chunks, ws.ptr(n), n) }
                }
            } else if v.get("op").as_str() == "forward" {
                handle.forward(attn.as_ref(), seq.as_ref(), inp("q"), inp("k"), inp("v"),
                               Output::new(&o.desc, &mut o.data), lse_out)
            } else {
                let chunks = v.get("chunks").as_i64() as i32;
                handle.decode_chunk(attn.as_ref(), seq.as_ref(), inp("q"), inp("k"), inp("v"),
                                    Output::new(&o.desc, &mut o.data), lse_out, chunks)
            };
            done.push(("o".into(), o));
            if let Some(l) = lse {
                done.push(("lse".into(), l));
            }
        }
        "backward" => {
            let (mut dq, mut dk, mut dv) = (take("dq").unwrap(), take("dk").unwrap(), take("dv").unwrap());
            let mut d_sinks = take("dsinks");
            result = if via_pointers {
                if let Some(t) = d_sinks.as_mut() {
                    unsafe { attn.as_mut().unwrap().set_sinks_gradient_device(t.data.as_mut_ptr()).unwrap() };
                }
                let (a, s) = (attn.as_ref(), seq.as_ref());
                let n = handle.backward_workspace_size(a, s, &inputs["q"].desc, &inputs["k"].desc, &inputs["v"].desc,
                                                       &inputs["o"].desc, &inputs["lse"].desc).unwrap();
                let mut ws = Workspace { buf: Vec::new() };
                unsafe {
                    handle.backward_device(a, s, dev(inp("q")), dev(inp("k")), dev(inp("v")), dev(inp("o")),
                                           dev(inp("do")), dev(inp("lse")), dev_out(&mut dq), dev_out(&mut dk),
                                           dev_out(&mut dv), ws.ptr(n), n)
                }
            } else if let Some(t) = d_sinks.as_mut() {
                let a = attn.as_mut().expect("dsinks need an attention descriptor");
                handle.backward_with_sinks_gradient(a, seq.as_ref(), inp("q"), inp("k"), inp("v"), inp("o"),
                                                    inp("do"), inp("lse"), Output::new(&dq.desc, &mut dq.data),
                                                    Output::new(&dk.desc, &mut dk.data),
                                                    Output::new(&dv.desc, &mut dv.data), &mut t.data)
            } else {
                handle.backward(attn.as_ref(), seq.as_ref(), inp("q"), inp("k"), inp("v"), inp("o"), inp("do"),
                                inp("lse"), Output::new(&dq.desc, &mut dq.data),
                                Output::new(&dk.desc, &mut dk.data), Output::new(&dv.desc, &mut dv.data))
            };
            done.push(("dq".into(), dq));
            done.push(("dk".into(), dk));
            done.push(("dv".into(), dv));
            if let Some(t) = d_sinks {
                done.push(("dsinks".into(), t));
            }
        }
        "merge" => {
            let mut o = take("o").unwrap();
            let mut lse = take("lse");
            let lse_out = lse.as_mut().map(|t| Output::new(&t.desc, &mut t.data));
            result = if via_pointers {
                let (po, pl) = (dev(inp("partial_o")), dev(inp("partial_lse")));
                let o_out = DeviceOutput { desc: &o.desc, ptr: o.data.as_mut_ptr() as *mut c_void };
                let l_out = lse_out.map(|l| DeviceOutput { desc: l.desc, ptr: l.data.as_mut_ptr() as *mut c_void });
                let n = handle.merge_states_workspace_size(po.desc, pl.desc, o_out.desc, l_out.map(|l| l.desc)).unwrap();
                let mut ws = Workspace { buf: Vec::new() };
                unsafe { handle.merge_states_device(po, pl, o_out, l_out, ws.ptr(n), n) }
            } else {
                handle.merge_states(inp("partial_o"), inp("partial_lse"), Output::new(&o.desc, &mut o.data), lse_out)
            };
            done.push(("o".into(), o));
            if let Some(l) = lse {
                done.push(("lse".into(), l));
            }
        }
        other => panic!("{}: unknown op {}", name, other),
    }
    if let Err(e) = result {
        return vec![format!("{}: {}", name, e)];
    }
    assert!(outputs.is_empty(), "{}: expected tensors this runner does not produce: {:?}", name,
            outputs.keys().collect::<Vec<_>>());
    let gates = v.get("gates");
    let mut problems = Vec::new();
    for (tensor, t) in &done {
        problems.extend(apply_gates(name, tensor, &t.data, v.get("expected").get(tensor), gates.get(tensor)));
    }
    problems
}

#[test]
fn every_vector_passes_its_gates_on_host() {
    let dir = testdata_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {}", dir.display(), e))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().map_or(false, |x| x == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no vectors in {}", dir.display());
    let mut handle = Handle::with_backend(Backend::Host).unwrap();
    let mut ops = std::collections::BTreeSet::new();
    let mut problems = Vec::new();
    for f in &files {
        let v = Json::parse(&std::fs::read_to_string(f).unwrap()).unwrap_or_else(|e| panic!("{}: {}", f.display(), e));
        ops.insert(v.get("op").as_str().to_string());
        if v.get("inputs").opt("sinks").is_some() {
            ops.insert(format!("{} with sinks", v.get("op").as_str()));
        }
        if v.get("expected").opt("dsinks").is_some() {
            ops.insert("dsinks".to_string());
        }
        problems.extend(run_vector(&mut handle, &v, false));
        problems.extend(run_vector(&mut handle, &v, true).into_iter().map(|p| format!("(pointers) {}", p)));
    }
    assert!(problems.is_empty(), "{} problem(s):\n  {}", problems.len(), problems.join("\n  "));
    // Every operation the format names is exercised, and every one that takes sinks with them, so a runner branch
    // cannot rot unnoticed.
    assert_eq!(
        ops.into_iter().collect::<Vec<_>>(),
        ["backward", "backward with sinks", "decode", "decode with sinks", "dsinks", "forward", "forward with sinks",
         "merge"]
    );
    println!("{} vectors passed", files.len());
}

/// The gates are not vacuous: a result nudged by more than its max_abs fails them.
#[test]
fn the_gates_reject_a_perturbed_result() {
    let path = testdata_dir().join("forward_plain.json");
    let v = Json::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let expected = v.get("expected").get("o");
    let gate = v.get("gates").get("o");
    let mut out: Vec<f32> = expected.get("data").as_array().iter().map(|x| number(x) as f32).collect();
    assert!(apply_gates("forward_plain", "o", &out, expected, gate).is_empty());
    out[3] += 4.0 * gate.get("max_abs").as_f64() as f32 + 1e-3;
    assert!(!apply_gates("forward_plain", "o", &out, expected, gate).is_empty());
    out[3] = f32::NAN;
    assert!(!apply_gates("forward_plain", "o", &out, expected, gate).is_empty());
}
