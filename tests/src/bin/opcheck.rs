//! `opcheck`: the bridge the numpy cross-check (tests/python/test_ops_numpy.py) drives.
//!
//! - `opcheck list` prints the op registry as JSON (name, group, doc, schema, inputs, attrs).
//! - `opcheck run DIR` reads `DIR/cases.json`, runs each case through the real runtime and
//!   writes `DIR/results.json` plus one raw little-endian file per output.
//!
//! A case: `{"id", "op", "inputs": [{"file", "dtype", "shape", "views": [...]}], "attrs": {..}}`,
//! and optionally `"grad": {"wrt": [input indices], "cotangent": {"file", "dtype", "shape"}}`:
//! those inputs (after their views) become leaves that require grad, and the result also
//! lists `"grads"`, the vector-Jacobian product of the output with the cotangent, one file
//! per input in `wrt` (what tests/python/test_grad_jax.py checks against `jax.vjp`).
//! Input files hold a dense base array; each view in `views` is a registry op applied to it
//! first (`{"op": "transpose", "attrs": {"dim0": 0, "dim1": 1}}`), so kernels see strided,
//! broadcast and offset inputs. Attribute values: JSON ints are ints, floats are floats, int
//! lists are int lists, strings are strings. bf16 and f16 travel as their 16-bit patterns.

use std::path::Path;
use std::process::ExitCode;

use neuronlab_core::autograd::{self, derivatives, derivatives::Derivative};
use neuronlab_core::ops::{AttrValue, Attrs, Registry};
use neuronlab_core::tensor::Buffer;
use neuronlab_core::{DType, Runtime, Tensor};
use serde_json::{json, Value};

fn attrs_from(v: Option<&Value>) -> Result<Attrs, String> {
    let mut attrs = Attrs::new();
    let Some(obj) = v.and_then(Value::as_object) else {
        return Ok(attrs);
    };
    for (name, value) in obj {
        let parsed = match value {
            Value::Number(n) if n.is_i64() => AttrValue::Int(n.as_i64().unwrap_or_default()),
            Value::Number(n) => AttrValue::Float(n.as_f64().unwrap_or(f64::NAN)),
            Value::String(s) => AttrValue::Str(s.clone()),
            Value::Array(items) => AttrValue::Ints(
                items
                    .iter()
                    .map(|i| {
                        i.as_i64()
                            .ok_or(format!("attribute '{name}': lists hold ints only"))
                    })
                    .collect::<Result<_, _>>()?,
            ),
            Value::Bool(b) => AttrValue::Int(*b as i64),
            other => return Err(format!("attribute '{name}': unsupported value {other}")),
        };
        attrs.0.push((name.clone(), parsed));
    }
    Ok(attrs)
}

fn load_input(rt: &Runtime, dir: &Path, spec: &Value) -> Result<Tensor, String> {
    let mut t = load_dense(rt, dir, spec)?;
    for view in spec["views"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
        let op = view["op"].as_str().ok_or("view without op")?;
        t = rt
            .call1(op, &[&t], &attrs_from(view.get("attrs"))?)
            .map_err(|e| format!("view {op}: {e}"))?;
    }
    Ok(t)
}

fn load_dense(rt: &Runtime, dir: &Path, spec: &Value) -> Result<Tensor, String> {
    let file = spec["file"].as_str().ok_or("input without file")?;
    let dtype: DType = spec["dtype"]
        .as_str()
        .ok_or("input without dtype")?
        .parse()
        .map_err(|e| format!("{e}"))?;
    let shape: Vec<usize> = spec["shape"]
        .as_array()
        .ok_or("input without shape")?
        .iter()
        .map(|d| d.as_u64().map(|d| d as usize).ok_or("bad dim"))
        .collect::<Result<_, _>>()?;
    let bytes = std::fs::read(dir.join(file)).map_err(|e| format!("{file}: {e}"))?;
    let buffer = Buffer::from_le_bytes(dtype, &bytes)
        .ok_or(format!("{file}: size is not a multiple of {dtype}"))?;
    rt.tensor(buffer, &shape).map_err(|e| e.to_string())
}

fn write_tensor(dir: &Path, file: String, t: &Tensor) -> Result<Value, String> {
    std::fs::write(dir.join(&file), t.to_buffer().to_le_bytes())
        .map_err(|e| format!("{file}: {e}"))?;
    Ok(json!({"file": file, "dtype": t.dtype().name(), "shape": t.shape()}))
}

/// The case's `grad` request: which inputs, and the output's cotangent.
fn grad_request(
    rt: &Runtime,
    dir: &Path,
    case: &Value,
) -> Result<Option<(Vec<usize>, Tensor)>, String> {
    let Some(request) = case.get("grad") else {
        return Ok(None);
    };
    let wrt = request["wrt"]
        .as_array()
        .ok_or("grad without wrt")?
        .iter()
        .map(|i| i.as_u64().map(|i| i as usize).ok_or("bad wrt index"))
        .collect::<Result<_, _>>()?;
    let cotangent = load_dense(rt, dir, &request["cotangent"])?;
    Ok(Some((wrt, cotangent)))
}

fn run_case(rt: &Runtime, dir: &Path, case: &Value) -> Value {
    let id = case["id"].as_str().unwrap_or("?").to_string();
    let result = (|| -> Result<(Vec<Value>, Vec<Value>), String> {
        let op = case["op"].as_str().ok_or("case without op")?;
        let mut inputs: Vec<Tensor> = case["inputs"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
            .iter()
            .map(|s| load_input(rt, dir, s))
            .collect::<Result<_, _>>()?;
        let request = grad_request(rt, dir, case)?;
        for &i in request.iter().flat_map(|(wrt, _)| wrt) {
            let input = inputs.get(i).ok_or(format!("wrt {i}: no such input"))?;
            inputs[i] = autograd::requires_grad(rt, input).map_err(|e| e.to_string())?;
        }
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let attrs = attrs_from(case.get("attrs"))?;
        let outputs = rt.call(op, &refs, &attrs).map_err(|e| e.to_string())?;
        let written = outputs
            .iter()
            .enumerate()
            .map(|(k, t)| write_tensor(dir, format!("{id}.out{k}.bin"), t))
            .collect::<Result<Vec<_>, _>>()?;
        let Some((wrt, cotangent)) = request else {
            return Ok((written, Vec::new()));
        };
        let leaves: Vec<Tensor> = wrt.iter().map(|&i| inputs[i].clone()).collect();
        let grads = autograd::grad(rt, &outputs[..1], &[Some(cotangent)], &leaves, false)
            .map_err(|e| format!("backward: {e}"))?;
        let grads = grads
            .iter()
            .zip(&wrt)
            .map(|(g, i)| write_tensor(dir, format!("{id}.grad{i}.bin"), g))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((written, grads))
    })();
    match result {
        Ok((outputs, grads)) => json!({"id": id, "ok": true, "outputs": outputs, "grads": grads}),
        Err(error) => json!({"id": id, "ok": false, "error": error}),
    }
}

fn list() -> Value {
    let ops: Vec<Value> = Registry::global()
        .ops()
        .iter()
        .map(|op| {
            json!({
                "name": op.name,
                "group": op.group.name(),
                "doc": op.doc,
                "schema": op.schema(),
                "inputs": op.inputs.iter().map(|i| json!({"name": i.name, "kind": format!("{:?}", i.kind)})).collect::<Vec<_>>(),
                "attrs": op.attrs.iter().map(|a| a.name).collect::<Vec<_>>(),
                "differentiable": matches!(derivatives::of(op.name), Some(Derivative::Vjp { .. })),
            })
        })
        .collect();
    Value::Array(ops)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["list"] => {
            println!("{}", list());
            ExitCode::SUCCESS
        }
        ["run", dir] => {
            let dir = Path::new(dir);
            let cases: Value = match std::fs::read(dir.join("cases.json"))
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
            {
                Ok(v) => v,
                Err(e) => {
                    eprintln!("opcheck: cannot read {}/cases.json: {e}", dir.display());
                    return ExitCode::FAILURE;
                }
            };
            let rt = match Runtime::from_env() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("opcheck: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let results: Vec<Value> = cases
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[])
                .iter()
                .map(|c| run_case(&rt, dir, c))
                .collect();
            if let Err(e) =
                std::fs::write(dir.join("results.json"), Value::Array(results).to_string())
            {
                eprintln!("opcheck: cannot write results.json: {e}");
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("usage: opcheck list | opcheck run DIR (DIR holds cases.json)");
            ExitCode::from(2)
        }
    }
}
