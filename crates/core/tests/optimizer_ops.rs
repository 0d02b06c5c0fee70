//! The fused optimizer ops against the same update written as elementwise registry ops, the
//! way torch's single-tensor Adam and AdamW run it: bitwise equal, for every float dtype,
//! with and without weight decay, over several steps.

use neuronlab_core::device::topology::Topology;
use neuronlab_core::ops::Attrs;
use neuronlab_core::runtime::RuntimeOptions;
use neuronlab_core::tensor::Buffer;
use neuronlab_core::{DType, Error, Runtime, Tensor};

fn rt() -> Runtime {
    Runtime::new(RuntimeOptions {
        topology: Topology::preset("trn2.3xlarge", None).unwrap(),
        host_limit: 1 << 32,
    })
}

struct Ops<'a>(&'a Runtime);

impl Ops<'_> {
    fn op(&self, name: &str, inputs: &[&Tensor]) -> Tensor {
        self.0.call1(name, inputs, &Attrs::new()).unwrap()
    }
    fn cast(&self, t: &Tensor, dtype: DType) -> Tensor {
        if t.dtype() == dtype {
            return t.clone();
        }
        let attrs = Attrs::new().with("dtype", dtype.name());
        self.0.call1("cast", &[t], &attrs).unwrap()
    }
    fn constant(&self, v: f64, dtype: DType) -> Tensor {
        let attrs = Attrs::new()
            .with("shape", Vec::<i64>::new())
            .with("value", v)
            .with("dtype", dtype.name());
        self.0.call1("full", &[], &attrs).unwrap()
    }
    fn wide(dtype: DType) -> DType {
        match dtype {
            DType::Bf16 | DType::F16 => DType::F32,
            d => d,
        }
    }
    /// `a op b` computed in `a`'s compute type and rounded to `a`'s dtype, as one in-place op.
    fn inplace(&self, name: &str, a: &Tensor, b: &Tensor) -> Tensor {
        let w = Self::wide(a.dtype());
        let r = self.op(name, &[&self.cast(a, w), &self.cast(b, w)]);
        self.cast(&r, a.dtype())
    }
    fn scaled(&self, a: &Tensor, v: f64) -> Tensor {
        self.inplace("mul", a, &self.constant(v, Self::wide(a.dtype())))
    }
}

/// torch's `_single_tensor_adam(w)` as elementwise ops, one rounding per in-place op.
#[allow(clippy::too_many_arguments)]
fn composed(
    o: &Ops,
    decoupled: bool,
    [b1, b2, eps, wd]: [f64; 4],
    lr: f64,
    step: f64,
    p: &Tensor,
    g: &Tensor,
    m: &Tensor,
    v: &Tensor,
) -> [Tensor; 3] {
    let f64c = |x| o.constant(x, DType::F64);
    let bias1 = o.op(
        "sub",
        &[&f64c(1.0), &o.op("pow", &[&f64c(b1), &f64c(step)])],
    );
    let bias2 = o.op(
        "sub",
        &[&f64c(1.0), &o.op("pow", &[&f64c(b2), &f64c(step)])],
    );
    let neg_step_size = o.op("neg", &[&o.op("div", &[&f64c(lr), &bias1])]);
    let bias2_sqrt = o.op("sqrt", &[&bias2]);
    let (mut p, mut g) = (p.clone(), g.clone());
    if decoupled {
        let decay = o.op("sub", &[&f64c(1.0), &o.op("mul", &[&f64c(lr), &f64c(wd)])]);
        p = o.inplace("mul", &p, &decay);
    }
    let w = Ops::wide(p.dtype());
    if !decoupled && wd != 0.0 {
        // grad.add(param, alpha=weight_decay): one op, rounded once.
        let scaled = o.op("mul", &[&o.cast(&p, w), &o.constant(wd, w)]);
        g = o.inplace("add", &g, &scaled);
    }
    let (wg, wm) = (o.cast(&g, w), o.cast(m, w));
    let lerp = o.scaled(&o.op("sub", &[&wg, &wm]), 1.0 - b1);
    let m_new = o.inplace("add", m, &lerp);
    let v_scaled = o.scaled(v, b2);
    let g2 = o.op("mul", &[&o.scaled(&wg, 1.0 - b2), &wg]);
    let v_new = o.inplace("add", &v_scaled, &g2);
    let root = o.cast(&o.op("sqrt", &[&o.cast(&v_new, w)]), p.dtype());
    let corrected = o.inplace("div", &root, &bias2_sqrt);
    let denom = o.inplace("add", &corrected, &o.constant(eps, w));
    let ratio = o.op("div", &[&o.cast(&m_new, w), &o.cast(&denom, w)]);
    let update = o.op("mul", &[&o.cast(&neg_step_size, w), &ratio]);
    let p_new = o.inplace("add", &p, &update);
    [p_new, m_new, v_new]
}

/// Deterministic values in about [-scale, scale], some exactly zero.
fn values(n: usize, seed: u64, scale: f64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|i| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if i % 11 == 5 {
                return 0.0;
            }
            ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn tensor(rt: &Runtime, v: &[f64], shape: &[usize], dtype: DType) -> Tensor {
    let t = rt.tensor(Buffer::F64(v.to_vec()), shape).unwrap();
    Ops(rt).cast(&t, dtype)
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_vec::<f64>().iter().map(|v| v.to_bits()).collect()
}

#[test]
fn fused_adam_and_adamw_give_the_bits_of_the_composed_update() {
    let rt = rt();
    let o = Ops(&rt);
    let configs = [
        (false, [0.9, 0.999, 1e-8, 0.0]),
        (false, [0.9, 0.999, 1e-8, 0.1]),
        (true, [0.9, 0.999, 1e-8, 0.01]),
        (true, [0.8, 0.99, 1e-6, 0.05]),
    ];
    // Over 2^14 elements, so that the fused kernel splits its work into parallel tasks.
    for (shape, n) in [(vec![3, 5], 15), (vec![], 1), (vec![130, 129], 130 * 129)] {
        for dtype in [DType::F32, DType::Bf16, DType::F16, DType::F64] {
            for (ci, &(decoupled, hyper)) in configs.iter().enumerate() {
                let name = if decoupled { "adamw_step" } else { "adam_step" };
                let seed = ci as u64 * 7 + n as u64;
                let mut p = tensor(&rt, &values(n, seed, 1.0), &shape, dtype);
                let mut m = tensor(&rt, &vec![0.0; n], &shape, dtype);
                let mut v = m.clone();
                let (mut rp, mut rm, mut rv) = (p.clone(), m.clone(), v.clone());
                for step in 1..=4 {
                    let g = tensor(&rt, &values(n, seed + step, 0.5), &shape, dtype);
                    let lr = 0.05 / step as f64;
                    let attrs = Attrs::new()
                        .with("beta1", hyper[0])
                        .with("beta2", hyper[1])
                        .with("eps", hyper[2])
                        .with("weight_decay", hyper[3]);
                    let (lr_t, step_t) = (
                        o.constant(lr, DType::F64),
                        o.constant(step as f64, DType::F64),
                    );
                    let out = rt
                        .call(name, &[&p, &g, &m, &v, &lr_t, &step_t], &attrs)
                        .unwrap();
                    let [np, nm, nv]: [Tensor; 3] = out.try_into().unwrap();
                    let [cp, cm, cv] =
                        composed(&o, decoupled, hyper, lr, step as f64, &rp, &g, &rm, &rv);
                    let what = format!("{name} {dtype} {shape:?} {hyper:?} step {step}");
                    assert_eq!(np.dtype(), dtype, "{what}");
                    assert_eq!(np.shape(), &shape[..], "{what}");
                    assert_eq!(bits(&np), bits(&cp), "param, {what}");
                    assert_eq!(bits(&nm), bits(&cm), "exp_avg, {what}");
                    assert_eq!(bits(&nv), bits(&cv), "exp_avg_sq, {what}");
                    if step == 1 {
                        // Later steps may be below half an ulp of a bf16 parameter.
                        assert_ne!(bits(&np), bits(&p), "the parameter moved, {what}");
                    }
                    (p, m, v) = (np, nm, nv);
                    (rp, rm, rv) = (cp, cm, cv);
                }
            }
        }
    }
}

#[test]
fn fused_adam_rejects_mismatched_state_and_non_scalar_hyperparameters() {
    let rt = rt();
    let o = Ops(&rt);
    let p = tensor(&rt, &[1.0, 2.0], &[2], DType::F32);
    let g16 = tensor(&rt, &[1.0, 2.0], &[2], DType::Bf16);
    let g3 = tensor(&rt, &[1.0, 2.0, 3.0], &[3], DType::F32);
    let one = o.constant(1.0, DType::F64);
    let attrs = Attrs::new()
        .with("beta1", 0.9)
        .with("beta2", 0.999)
        .with("eps", 1e-8)
        .with("weight_decay", 0.0);
    let message = |inputs: &[&Tensor]| match rt.call("adamw_step", inputs, &attrs) {
        Err(e @ Error::Op { .. }) => e.to_string(),
        other => panic!("expected an op error, got {other:?}"),
    };
    let e = message(&[&p, &g16, &p, &p, &one, &one]);
    assert!(
        e.contains("grad must match param f32[2], got bf16[2]"),
        "{e}"
    );
    let e = message(&[&p, &p, &g3, &p, &one, &one]);
    assert!(e.contains("exp_avg must match param"), "{e}");
    let e = message(&[&p, &p, &p, &p, &p, &one]);
    assert!(e.contains("lr must hold one number"), "{e}");
    let Err(e) = rt.call("adamw_step", &[&p, &p, &p, &p, &one, &one], &Attrs::new()) else {
        panic!("ran without its hyperparameters");
    };
    assert!(e.to_string().contains("beta1"), "{e}");
}
