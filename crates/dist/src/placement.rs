//! Placements: how a distributed tensor lies along one mesh dimension, as torch's DTensor
//! `Shard(d)`, `Replicate()` and `Partial(op)`, and the placement-list syntax of the guest ABI
//! (guest-sdk/ABI.md, "dist").

use std::fmt;

use super::combine::ReduceOp;

/// How a distributed tensor lies along one dimension of its device mesh.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Placement {
    /// Tensor dimension `d` is cut into `torch.chunk` pieces, one per rank of the mesh
    /// dimension (ranks past the last chunk hold empty shards).
    Shard(usize),
    /// Every rank of the mesh dimension holds the whole tensor.
    Replicate,
    /// Every rank holds a contribution; the tensor is their reduction with this op, folded
    /// in group order.
    Partial(ReduceOp),
}

/// The forms [`Placement::parse_list`] accepts, for error messages.
const ACCEPTED: &str = "Shard(d), Replicate(), Partial(op), Partial() (= Partial(sum)), \
                        or the short forms S(d), R, P, P(op)";

impl Placement {
    /// Whether this is `Shard(dim)`.
    pub fn is_shard_of(&self, dim: usize) -> bool {
        *self == Placement::Shard(dim)
    }

    /// Parses one placement: `Shard(d)`, `Replicate()`, `Partial(op)`, `Partial()` (which is
    /// `Partial(sum)`), or the short forms `S(d)`, `R`, `P` and `P(op)`. Whitespace around the
    /// item and inside the parentheses is ignored. The error names the item and the forms
    /// accepted.
    pub fn parse(item: &str) -> Result<Placement, String> {
        let text = item.trim();
        let bad = |why: String| format!("bad placement '{text}': {why}; accepted: {ACCEPTED}");
        let (head, arg) = match text.find('(') {
            Some(open) => {
                let Some(inner) = text[open + 1..].strip_suffix(')') else {
                    return Err(bad("a '(' without a closing ')' at the end".to_string()));
                };
                (text[..open].trim(), Some(inner.trim()))
            }
            None => (text, None),
        };
        match (head, arg) {
            ("Shard" | "S", Some(arg)) => {
                if arg.is_empty() {
                    return Err(bad("Shard needs a tensor dimension, as Shard(0)".into()));
                }
                arg.parse::<usize>().map(Placement::Shard).map_err(|_| {
                    bad(format!(
                        "the shard dimension '{arg}' is not a non-negative integer"
                    ))
                })
            }
            ("Shard" | "S", None) => Err(bad("Shard needs a tensor dimension, as Shard(0)".into())),
            ("Replicate" | "R", None) => Ok(Placement::Replicate),
            ("Replicate" | "R", Some("")) => Ok(Placement::Replicate),
            ("Replicate" | "R", Some(arg)) => Err(bad(format!(
                "Replicate takes no argument, but was given '{arg}'"
            ))),
            ("Partial" | "P", None | Some("")) => Ok(Placement::Partial(ReduceOp::Sum)),
            ("Partial" | "P", Some(op)) => ReduceOp::parse(op)
                .map(Placement::Partial)
                .map_err(|e| bad(e.to_string())),
            ("", _) => Err(bad("an empty placement".to_string())),
            (other, _) => Err(bad(format!("unknown placement kind '{other}'"))),
        }
    }

    /// Parses a comma-separated list of placements, one per mesh dimension, such as
    /// `"Shard(0), Replicate()"` or `"S(0),R"`. See [`Placement::parse`] for the forms of
    /// each item. An empty list is an error (a mesh has at least one dimension).
    pub fn parse_list(text: &str) -> Result<Vec<Placement>, String> {
        if text.trim().is_empty() {
            return Err(format!(
                "no placements given: give one per mesh dimension, comma-separated, each \
                 one of {ACCEPTED}"
            ));
        }
        split_items(text)
            .into_iter()
            .enumerate()
            .map(|(i, item)| {
                Placement::parse(item).map_err(|e| format!("placement {i} of '{text}': {e}"))
            })
            .collect()
    }
}

/// Splits at the commas outside parentheses.
fn split_items(text: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth <= 0 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&text[start..]);
    items
}

impl fmt::Display for Placement {
    /// As torch prints them: `Shard(1)`, `Replicate()`, `Partial(sum)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Shard(d) => write!(f, "Shard({d})"),
            Placement::Replicate => f.write_str("Replicate()"),
            Placement::Partial(op) => write!(f, "Partial({})", op.name()),
        }
    }
}

/// Formats a placement list as a tuple: `(Shard(0), Replicate())`.
pub fn format_placements(placements: &[Placement]) -> String {
    let items: Vec<String> = placements.iter().map(|p| p.to_string()).collect();
    format!("({})", items.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_torch_spelling() {
        assert_eq!(Placement::Shard(1).to_string(), "Shard(1)");
        assert_eq!(Placement::Replicate.to_string(), "Replicate()");
        assert_eq!(
            Placement::Partial(ReduceOp::Sum).to_string(),
            "Partial(sum)"
        );
        assert_eq!(
            Placement::Partial(ReduceOp::Max).to_string(),
            "Partial(max)"
        );
        assert_eq!(
            format_placements(&[Placement::Shard(0), Placement::Replicate]),
            "(Shard(0), Replicate())"
        );
        assert_eq!(format_placements(&[]), "()");
    }

    #[test]
    fn parse_list_accepts_long_and_short_forms() {
        use Placement::*;
        assert_eq!(
            Placement::parse_list("Shard(0), Replicate()").unwrap(),
            [Shard(0), Replicate]
        );
        assert_eq!(
            Placement::parse_list("S(1),R,P").unwrap(),
            [Shard(1), Replicate, Partial(ReduceOp::Sum)]
        );
        assert_eq!(
            Placement::parse_list(" Partial() ,Partial(max),  P( min ) , P(avg), Partial(product)")
                .unwrap(),
            [
                Partial(ReduceOp::Sum),
                Partial(ReduceOp::Max),
                Partial(ReduceOp::Min),
                Partial(ReduceOp::Avg),
                Partial(ReduceOp::Product)
            ]
        );
        assert_eq!(
            Placement::parse_list("Shard( 12 ),R()").unwrap(),
            [Shard(12), Replicate]
        );
        // Display round-trips.
        let all = [
            Shard(3),
            Replicate,
            Partial(ReduceOp::Sum),
            Partial(ReduceOp::Avg),
            Partial(ReduceOp::Product),
            Partial(ReduceOp::Min),
            Partial(ReduceOp::Max),
        ];
        let text = format_placements(&all);
        assert_eq!(
            Placement::parse_list(&text[1..text.len() - 1]).unwrap(),
            all
        );
    }

    #[test]
    fn parse_errors_name_the_item_and_the_forms() {
        let err = |s: &str| Placement::parse_list(s).unwrap_err();
        let e = err("Shard(0), Shard(-1)");
        assert!(
            e.starts_with("placement 1 of 'Shard(0), Shard(-1)': bad placement 'Shard(-1)'"),
            "{e}"
        );
        assert!(e.contains("'-1' is not a non-negative integer"), "{e}");
        assert!(
            e.contains("accepted: Shard(d), Replicate(), Partial(op)"),
            "{e}"
        );
        let e = err("Partial(mean)");
        assert!(e.contains("unknown reduce op 'mean'"), "{e}");
        let e = err("Replicate(0)");
        assert!(
            e.contains("Replicate takes no argument, but was given '0'"),
            "{e}"
        );
        let e = err("Sharded(0)");
        assert!(e.contains("unknown placement kind 'Sharded'"), "{e}");
        let e = err("S(0),,R");
        assert!(
            e.contains("placement 1 of 'S(0),,R': bad placement '': an empty placement"),
            "{e}"
        );
        let e = err("Shard(1");
        assert!(e.contains("without a closing ')'"), "{e}");
        assert!(err("S").contains("Shard needs a tensor dimension"));
        assert!(err("S()").contains("Shard needs a tensor dimension"));
        assert!(err("  ").starts_with("no placements given"));
    }
}
