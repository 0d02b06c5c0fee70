//! A plain-text table of op events: what `neuronlab demo` prints.

use super::fmt::duration_us;
use super::{Event, EventKind};

/// One row per op event: index, op, inputs -> outputs, host time, modeled time and its bound.
pub fn op_table(events: &[Event]) -> String {
    let mut rows: Vec<[String; 6]> = vec![[
        "#".into(),
        "op".into(),
        "shapes".into(),
        "host".into(),
        "modeled".into(),
        "bound".into(),
    ]];
    for e in events {
        if let EventKind::Op(op) = &e.kind {
            let sigs = |v: &[super::TensorSig]| {
                if v.is_empty() {
                    return "()".to_string();
                }
                v.iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            rows.push([
                rows.len().to_string(),
                op.name.to_string(),
                format!("{} -> {}", sigs(&op.inputs), sigs(&op.outputs)),
                duration_us(op.host_us),
                duration_us(op.modeled.total_s * 1e6),
                op.modeled.bound.to_string(),
            ]);
        }
    }
    let widths: Vec<usize> = (0..6)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|r| {
            let cells: Vec<String> = r
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(c, (cell, w))| {
                    // Numbers right-aligned, text left-aligned.
                    if c == 0 || c == 3 || c == 4 {
                        format!("{cell:>w$}")
                    } else {
                        format!("{cell:<w$}")
                    }
                })
                .collect();
            cells.join("  ").trim_end().to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}
