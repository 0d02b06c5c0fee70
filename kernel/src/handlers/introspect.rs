//! `complete_request`, `inspect_request` and `is_complete_request`, answered by the session.
//!
//! Jupyter counts `cursor_pos`, `cursor_start` and `cursor_end` in Unicode code points; the
//! session counts bytes. The conversions are here.

use jupyter_protocol::{
    CompleteReply, InspectReply, IsCompleteReply, Media, MediaType, ReplyStatus,
};
use neuronlab_session::{IsComplete, Session};
use serde_json::{json, Value};

use crate::wire::Request;

/// The byte offset of code point `chars` in `text` (the end when it is past the end).
pub fn byte_offset(text: &str, chars: usize) -> usize {
    text.char_indices()
        .nth(chars)
        .map_or(text.len(), |(i, _)| i)
}

/// How many code points come before byte offset `bytes` of `text`.
pub fn char_index(text: &str, bytes: usize) -> usize {
    text.char_indices().take_while(|(i, _)| *i < bytes).count()
}

/// The request's cursor as a byte offset into its `code` (the end when absent).
fn cursor(request: &Request) -> usize {
    let code = request.text("code");
    match request.number("cursor_pos") {
        Some(pos) => byte_offset(code, usize::try_from(pos).unwrap_or(0)),
        None => code.len(),
    }
}

/// The Jupyter completion type of a session completion kind (the names IPython uses, which
/// front ends have icons for).
fn completion_type(kind: &str) -> &'static str {
    match kind {
        "magic" => "magic",
        "argument" => "param",
        "variable" => "instance",
        "op" | "method" => "function",
        "keyword" => "keyword",
        _ => "text",
    }
}

/// The reply to `complete_request`: the session's matches, with each one's type and
/// signature in `metadata._jupyter_types_experimental`, as IPython gives them.
pub fn complete(session: Option<&Session>, request: &Request) -> CompleteReply {
    let code = request.text("code");
    let cursor = cursor(request);
    let Some(session) = session else {
        let at = char_index(code, cursor);
        return CompleteReply {
            cursor_start: at,
            cursor_end: at,
            ..CompleteReply::default()
        };
    };
    let completion = session.complete(code, cursor);
    let (start, end) = (
        char_index(code, completion.start),
        char_index(code, completion.end),
    );
    let types: Vec<Value> = completion
        .matches
        .iter()
        .map(|m| {
            json!({
                "start": start,
                "end": end,
                "text": m.text,
                "type": completion_type(m.kind),
                "signature": m.detail,
            })
        })
        .collect();
    let mut metadata = serde_json::Map::new();
    metadata.insert("_jupyter_types_experimental".into(), Value::Array(types));
    CompleteReply {
        matches: completion.matches.into_iter().map(|m| m.text).collect(),
        cursor_start: start,
        cursor_end: end,
        metadata,
        status: ReplyStatus::Ok,
        error: None,
    }
}

/// The reply to `inspect_request`: what the word at the cursor is, as plain text.
pub fn inspect(session: Option<&Session>, request: &Request) -> InspectReply {
    let found = session.and_then(|s| s.inspect(request.text("code"), cursor(request)));
    match found {
        Some(bundle) => InspectReply {
            found: true,
            data: Media::new(vec![MediaType::Plain(bundle.plain().to_string())]),
            ..InspectReply::default()
        },
        None => InspectReply::default(),
    }
}

/// The reply to `is_complete_request`: `complete`, `incomplete` with the next line's indent,
/// or `invalid`; `unknown` without a session.
pub fn is_complete(session: Option<&Session>, request: &Request) -> IsCompleteReply {
    match session.map(|s| s.is_complete(request.text("code"))) {
        Some(IsComplete::Complete) => IsCompleteReply::complete(),
        Some(IsComplete::Incomplete { indent }) => IsCompleteReply::incomplete(indent),
        Some(IsComplete::Invalid) => IsCompleteReply::invalid(),
        None => IsCompleteReply::unknown(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_convert_between_code_points_and_bytes() {
        let text = "é + x";
        assert_eq!(byte_offset(text, 0), 0);
        assert_eq!(byte_offset(text, 1), 2);
        assert_eq!(byte_offset(text, 5), text.len());
        assert_eq!(byte_offset(text, 99), text.len());
        assert_eq!(char_index(text, 2), 1);
        assert_eq!(char_index(text, text.len()), 5);
        for chars in 0..=5 {
            assert_eq!(char_index(text, byte_offset(text, chars)), chars);
        }
    }

    #[test]
    fn kinds_map_to_jupyter_types() {
        assert_eq!(completion_type("variable"), "instance");
        assert_eq!(completion_type("op"), "function");
        assert_eq!(completion_type("magic"), "magic");
        assert_eq!(completion_type("something new"), "text");
    }
}
