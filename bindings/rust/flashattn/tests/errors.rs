//! Bad input: the library's status and message come back as `Error`, nothing is written (a canary output keeps its
//! values), and slices of the wrong length or element type are refused before the library is called.

use flashattn::{
    AttentionDescriptor, Backend, DataType, Handle, Input, Mask, Operation, Output, SeqDescriptor, Status,
    TensorDescriptor,
};
use flashattn_sys as sys;

const CANARY: f32 = 7.25;

/// The calling thread's last library message, read through the raw API.
fn library_message() -> String {
    let mut buf = vec![0u8; 1024];
    let len = unsafe { sys::flashAttnGetLastErrorMessage(buf.as_mut_ptr() as *mut _, buf.len()) };
    buf.truncate(len.min(1023));
    String::from_utf8(buf).unwrap()
}

struct Problem {
    q: TensorDescriptor,
    kv: TensorDescriptor,
    lse: TensorDescriptor,
    qd: Vec<f32>,
    kd: Vec<f32>,
    vd: Vec<f32>,
}

/// A valid GQA problem: Q/O [1, 4, 3, 8], K/V [1, kv_heads, 5, 8].
fn problem(kv_heads: i64) -> Problem {
    let q = TensorDescriptor::contiguous(DataType::Fp32, &[1, 4, 3, 8]).unwrap();
    let kv = TensorDescriptor::contiguous(DataType::Fp32, &[1, kv_heads, 5, 8]).unwrap();
    let lse = TensorDescriptor::contiguous(DataType::Fp32, &[1, 4, 3]).unwrap();
    let n = (kv_heads * 5 * 8) as usize;
    Problem {
        q,
        kv,
        lse,
        qd: (0..96).map(|i| (i as f32 * 0.37).sin()).collect(),
        kd: (0..n).map(|i| (i as f32 * 0.11).cos()).collect(),
        vd: (0..n).map(|i| (i as f32 * 0.23).sin()).collect(),
    }
}

fn host() -> Handle {
    let h = Handle::with_backend(Backend::Host).unwrap();
    assert_eq!(h.backend(), Backend::Host);
    h
}

#[test]
fn a_valid_forward_writes_its_outputs() {
    // The counterpart of the refusals below: the same problem with correct arguments does write o and lse, so an
    // unchanged canary there means the call was stopped, not that forward writes nothing.
    let p = problem(2);
    let mut o = vec![CANARY; 96];
    let mut lse = vec![CANARY; 12];
    host()
        .forward(None, None, Input::new(&p.q, &p.qd), Input::new(&p.kv, &p.kd), Input::new(&p.kv, &p.vd),
                 Output::new(&p.q, &mut o), Some(Output::new(&p.lse, &mut lse)))
        .unwrap();
    assert!(o.iter().all(|&x| x != CANARY && x.is_finite()));
    assert!(lse.iter().all(|&x| x != CANARY && x.is_finite()));
}

#[test]
fn the_library_status_and_message_come_back_and_nothing_is_written() {
    // 4 query heads over 3 KV heads: valid descriptors, an invalid problem that only the library judges.
    let p = problem(3);
    let mut o = vec![CANARY; 96];
    let err = host()
        .forward(None, None, Input::new(&p.q, &p.qd), Input::new(&p.kv, &p.kd), Input::new(&p.kv, &p.vd),
                 Output::new(&p.q, &mut o), None)
        .unwrap_err();
    assert_eq!(err.status(), Status::BadParam);
    assert!(err.from_library());
    assert!(!err.message().is_empty());
    assert_eq!(err.message(), library_message(), "the message is the library's own");
    assert!(err.message().contains('3') && err.message().contains('4'), "message names the values: {}", err);
    assert!(err.to_string().starts_with("FLASHATTN_STATUS_BAD_PARAM: "), "{}", err);
    assert!(o.iter().all(|&x| x == CANARY), "a failed call wrote its output");
}

#[test]
fn a_short_input_slice_is_refused_before_the_call() {
    let p = problem(2);
    let mut o = vec![CANARY; 96];
    // Leave a known library message behind; a refused call must not replace it (nor, with the canary, succeed).
    assert!(TensorDescriptor::new(DataType::Fp32, &[2, 2], &[2, 2]).is_err());
    let before = library_message();
    assert!(!before.is_empty());
    let err = host()
        .forward(None, None, Input::new(&p.q, &p.qd[..95]), Input::new(&p.kv, &p.kd), Input::new(&p.kv, &p.vd),
                 Output::new(&p.q, &mut o), None)
        .unwrap_err();
    assert_eq!(err.status(), Status::BadParam);
    assert!(!err.from_library());
    assert!(err.message().starts_with("q: "), "{}", err);
    assert!(err.message().contains("95") && err.message().contains("96"), "{}", err);
    assert!(o.iter().all(|&x| x == CANARY));
    assert_eq!(library_message(), before);
}

#[test]
fn short_output_slices_are_refused_by_name() {
    let p = problem(2);
    let mut o = vec![CANARY; 95];
    let err = host()
        .forward(None, None, Input::new(&p.q, &p.qd), Input::new(&p.kv, &p.kd), Input::new(&p.kv, &p.vd),
                 Output::new(&p.q, &mut o), None)
        .unwrap_err();
    assert!(err.message().starts_with("o: "), "{}", err);
    assert!(o.iter().all(|&x| x == CANARY));

    let mut o = vec![CANARY; 96];
    let mut lse = vec![CANARY; 11];
    let err = host()
        .forward(None, None, Input::new(&p.q, &p.qd), Input::new(&p.kv, &p.kd), Input::new(&p.kv, &p.vd),
                 Output::new(&p.q, &mut o), Some(Output::new(&p.lse, &mut lse)))
        .unwrap_err();
    assert!(err.message().starts_with("lse: "), "{}", err);
    assert!(o.iter().all(|&x| x == CANARY) && lse.iter().all(|&x| x == CANARY));
}

#[test]
fn strided_views_need_only_their_span() {
    // Q read every other row of a [1, 4, 6, 8] buffer: the span is shorter than the buffer, and enough.
    let q = TensorDescriptor::new(DataType::Fp32, &[1, 4, 3, 8], &[192, 48, 16, 1]).unwrap();
    assert_eq!(q.span().unwrap(), 3 * 48 + 2 * 16 + 8);
    let p = problem(2);
    let qd: Vec<f32> = (0..q.span().unwrap()).map(|i| (i as f32 * 0.1).sin()).collect();
    let mut o = vec![CANARY; 96];
    host()
        .forward(None, None, Input::new(&q, &qd), Input::new(&p.kv, &p.kd), Input::new(&p.kv, &p.vd),
                 Output::new(&p.q, &mut o), None)
        .unwrap();
    let err = host()
        .forward(None, None, Input::new(&q, &qd[..qd.len() - 1]), Input::new(&p.kv, &p.kd),
                 Input::new(&p.kv, &p.vd), Output::new(&p.q, &mut o), None)
        .unwrap_err();
    assert!(err.message().starts_with("q: "), "{}", err);
}

#[test]
fn a_slice_of_the_wrong_element_type_is_refused() {
    let p = problem(2);
    let q16 = vec![0u16; 96];
    let k16 = vec![0u16; 80];
    let mut o16 = vec![0x7e00u16; 96];
    let err = host()
        .forward(None, None, Input::new(&p.q, &q16), Input::new(&p.kv, &k16), Input::new(&p.kv, &k16),
                 Output::new(&p.q, &mut o16), None)
        .unwrap_err();
    assert!(err.message().starts_with("q: ") && err.message().contains("Fp32"), "{}", err);
    assert!(o16.iter().all(|&x| x == 0x7e00));
}

#[test]
fn descriptor_errors_carry_the_library_message() {
    let err = TensorDescriptor::new(DataType::Fp32, &[1, 2, 3, 8], &[48, 24, 8, 2]).unwrap_err();
    assert_eq!(err.status(), Status::BadParam);
    assert!(err.from_library() && !err.message().is_empty());
    let err = TensorDescriptor::new(DataType::Fp32, &[1, 2], &[2]).unwrap_err();
    assert!(!err.from_library() && err.message().starts_with("strides: "), "{}", err);

    let mut attn = AttentionDescriptor::new().unwrap();
    let err = attn.set_scale(-1.0).unwrap_err();
    assert_eq!(err.status(), Status::BadParam);
    assert_eq!(attn.scale().unwrap(), 0.0, "a failed setter leaves the default");
    assert!(attn.set_window(-2, 0).is_err());
    assert!(attn.set_softcap(f32::NAN).is_err());
}

#[test]
fn descriptors_read_back_what_was_set() {
    let d = TensorDescriptor::new(DataType::Bf16, &[2, 3, 4, 8], &[96, 8, 24, 1]).unwrap();
    assert_eq!(d.query().unwrap(), (DataType::Bf16, vec![2, 3, 4, 8], vec![96, 8, 24, 1]));

    let mut attn = AttentionDescriptor::new().unwrap();
    attn.set_scale(0.5).unwrap();
    attn.set_mask(Mask::CausalTopLeft).unwrap();
    attn.set_window(4, 0).unwrap();
    attn.set_softcap(30.0).unwrap();
    attn.set_deterministic(true).unwrap();
    attn.set_alibi_slopes(&[0.5, 0.25], true).unwrap();
    assert_eq!(attn.scale().unwrap(), 0.5);
    assert_eq!(attn.mask().unwrap(), Mask::CausalTopLeft);
    assert_eq!(attn.window().unwrap(), (4, 0));
    assert_eq!(attn.softcap().unwrap(), 30.0);
    assert!(attn.deterministic().unwrap());
    let (ptr, per_batch) = attn.alibi_slopes().unwrap();
    assert!(!ptr.is_null() && per_batch);
    assert_eq!(unsafe { *ptr.add(1) }, 0.25, "the library reads the descriptor's own copy");
    attn.clear_alibi_slopes().unwrap();
    assert!(attn.alibi_slopes().unwrap().0.is_null());

    let mut seq = SeqDescriptor::new().unwrap();
    seq.set_ragged(&[0, 3, 5], &[0, 4, 9], 3, 5).unwrap();
    assert_eq!(seq.ragged().unwrap(), (2, 3, 5));
    seq.set_kv_lengths(&[4, 5]).unwrap();
    assert_eq!(seq.kv_lengths_batch().unwrap(), 2);
    seq.set_paged(&[0, 1, 2, 3, 4, 5], 3).unwrap();
    assert_eq!(seq.paged().unwrap(), (2, 3));
    let err = seq.set_paged(&[0, 1, 2, 3], 3).unwrap_err();
    assert!(err.message().starts_with("block_table: "), "{}", err);
    seq.clear_paged().unwrap();
    assert_eq!(seq.paged().unwrap().0, 0);
    seq.clear_ragged().unwrap();
    assert_eq!(seq.ragged().unwrap().0, 0);
}

#[test]
fn too_few_alibi_slopes_are_refused() {
    let p = problem(2);
    let mut attn = AttentionDescriptor::new().unwrap();
    attn.set_alibi_slopes(&[0.5, 0.25, 0.125], false).unwrap();
    let mut o = vec![CANARY; 96];
    let err = host()
        .forward(Some(&attn), None, Input::new(&p.q, &p.qd), Input::new(&p.kv, &p.kd), Input::new(&p.kv, &p.vd),
                 Output::new(&p.q, &mut o), None)
        .unwrap_err();
    assert!(err.message().starts_with("alibi slopes: ") && err.message().contains('4'), "{}", err);
    assert!(o.iter().all(|&x| x == CANARY));
    attn.set_alibi_slopes(&[0.5, 0.25, 0.125, 0.0625], false).unwrap();
    host()
        .forward(Some(&attn), None, Input::new(&p.q, &p.qd), Input::new(&p.kv, &p.kd), Input::new(&p.kv, &p.vd),
                 Output::new(&p.q, &mut o), None)
        .unwrap();
}

#[test]
fn check_support_reports_or_refuses() {
    let p = problem(2);
    let h = host();
    let s = h.check_support(Operation::Forward, None, None, &p.q, Some(&p.kv), Some(&p.kv), &p.q).unwrap();
    assert!(!s.description.is_empty());
    assert!(s.deterministic, "the HOST forward is deterministic");
    let bad = problem(3);
    let err = h.check_support(Operation::Forward, None, None, &bad.q, Some(&bad.kv), Some(&bad.kv), &bad.q)
        .unwrap_err();
    assert_eq!(err.status(), Status::BadParam);
}

#[test]
fn a_cuda_handle_is_refused_or_served() {
    // Without a GPU (or without the CUDA backend in this build) the library says so; with one, the handle works
    // and host slices are refused by name before any call.
    match Handle::with_backend(Backend::Cuda) {
        Err(e) => {
            assert!(matches!(e.status(), Status::NoDevice | Status::NotSupported | Status::ArchMismatch), "{}", e);
            assert!(!e.message().is_empty());
        }
        Ok(mut h) => {
            let p = problem(2);
            let mut o = vec![CANARY; 96];
            let err = h
                .forward(None, None, Input::new(&p.q, &p.qd), Input::new(&p.kv, &p.kd), Input::new(&p.kv, &p.vd),
                         Output::new(&p.q, &mut o), None)
                .unwrap_err();
            assert!(err.message().starts_with("forward: "), "{}", err);
        }
    }
}

#[test]
fn handles_and_descriptors_move_between_threads() {
    let p = problem(2);
    let handle = host();
    let out = std::thread::spawn(move || {
        let mut handle = handle;
        let mut o = vec![0.0f32; 96];
        handle
            .forward(None, None, Input::new(&p.q, &p.qd), Input::new(&p.kv, &p.kd), Input::new(&p.kv, &p.vd),
                     Output::new(&p.q, &mut o), None)
            .unwrap();
        o
    })
    .join()
    .unwrap();
    assert!(out.iter().all(|x| x.is_finite()));
}

#[test]
fn status_names_are_the_library_s() {
    assert_eq!(Status::BadParam.name(), "FLASHATTN_STATUS_BAD_PARAM");
    assert_eq!(Status::from_raw(42), Status::Unknown(42));
    assert_eq!(Status::Unknown(42).name(), "FLASHATTN_STATUS_UNKNOWN");
    assert_eq!(flashattn::version(), 100, "the crate is 0.1.0, for library 0.1.x");
}
