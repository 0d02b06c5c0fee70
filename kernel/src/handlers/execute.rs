//! `execute_request`: a cell through [`Session::execute`], its [`Output`]s turned into iopub
//! messages as they happen, then the reply.
//!
//! | output | message |
//! |---|---|
//! | `Stdout`, `Stderr` | `stream` (batched briefly by the [outbox](crate::outbox)) |
//! | `Display` | `display_data` |
//! | `DisplayWithId` | `display_data` with the id in `transient`, or `update_display_data` |
//! | `ClearOutput` | `clear_output` |
//! | `Progress` | `display_data` with the progress id in `transient`, then `update_display_data` |
//! | `Page` | a `page` payload in the reply (the notebook's pager) |
//! | `Summary` (the cell's event summary) | `display_data`, metadata `{"neuronlab": {"kind": "summary"}}` |
//! | `Result` | `execute_result` with the execution count |
//! | `Error` | `error`, and the reply's error status |
//!
//! `silent` sends no `execute_input`, `execute_result` or summary (streams, displays and
//! errors still go out) and stores no history; `store_history: false` stores no history, nor
//! does an empty cell. Neither kind takes an execution count, as in ipykernel.

use std::collections::HashSet;
use std::sync::Arc;

use jupyter_protocol::{
    ClearOutput, DisplayData, ErrorOutput, ExecuteInput, ExecuteReply, ExecuteResult,
    ExecutionCount, JupyterMessage, Media, MediaType, Payload, ReplyError, ReplyStatus, Transient,
    UpdateDisplayData,
};
use neuronlab_session::{CellError, MimeBundle, Outcome, Output, Session};
use serde_json::{json, Value};

use crate::history_store::History;
use crate::outbox::{Outbox, Outgoing, Stream};
use crate::wire::Request;

/// How an execute request ended, for the worker's `stop_on_error` handling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Executed {
    /// The cell ran to its end.
    Ok,
    /// It failed or was interrupted; queued cells are aborted if the request asked for it.
    Failed {
        /// The request's `stop_on_error`.
        stop_on_error: bool,
    },
}

/// Runs the cell of `request` in `session` (or reports why there is no session), sending its
/// outputs through `outbox`; returns how it ended and the reply, for the caller to send (after
/// it has taken the requests queued meanwhile, which `stop_on_error` aborts).
// The execute_request sequence of the Jupyter protocol, in the order the messages go out.
pub fn execute(
    session: Result<&mut Session, &str>,
    history: &mut History,
    request: &Arc<Request>,
    outbox: &Outbox,
) -> (Executed, JupyterMessage) {
    let code = request.text("code");
    let silent = request.flag("silent", false);
    let store_history = !silent && request.flag("store_history", true);
    let stop_on_error = request.flag("stop_on_error", true);
    let session = match session {
        Ok(session) => session,
        Err(why) => {
            let error = CellError::new("SessionError", why);
            send_iopub(outbox, request.child(error_output(&error)));
            let reply = request.child(error_reply(&error, 0));
            return (Executed::Failed { stop_on_error }, reply);
        }
    };
    let count = session.execution_count() + 1;
    if !silent {
        send_iopub(
            outbox,
            request.child(ExecuteInput {
                code: code.to_string(),
                execution_count: execution_count(count),
            }),
        );
    }
    let mut error: Option<CellError> = None;
    let mut result: Option<String> = None;
    let mut payload = Vec::new();
    // The progress ids shown so far: a later report of one updates its display.
    let mut progress_shown = HashSet::new();
    let outcome = session.execute_with(code, store_history, &mut |output| match output {
        Output::Stdout(text) => stream(outbox, request, Stream::Stdout, text),
        Output::Stderr(text) => stream(outbox, request, Stream::Stderr, text),
        Output::Display(bundle) => {
            send_iopub(outbox, request.child(display_data(&bundle, None)));
        }
        Output::DisplayWithId { id, bundle, update } => {
            let message = match update {
                true => request.child(UpdateDisplayData::new(media(&bundle), &id)),
                false => request.child(DisplayData {
                    transient: Some(Transient {
                        display_id: Some(id),
                    }),
                    ..display_data(&bundle, None)
                }),
            };
            send_iopub(outbox, message);
        }
        Output::ClearOutput { wait } => {
            send_iopub(outbox, request.child(ClearOutput { wait }));
        }
        Output::Page(bundle) => payload.push(Payload::Page {
            data: media(&bundle),
            start: 0,
        }),
        Output::Progress(progress) => {
            let bundle = progress.bundle();
            let message = match progress_shown.insert(progress.id.clone()) {
                false => request.child(UpdateDisplayData::new(media(&bundle), &progress.id)),
                true => request.child(DisplayData {
                    transient: Some(Transient {
                        display_id: Some(progress.id),
                    }),
                    ..display_data(&bundle, None)
                }),
            };
            send_iopub(outbox, message);
        }
        Output::Summary(bundle) => {
            if !silent {
                let kind = json!({"neuronlab": {"kind": "summary"}});
                send_iopub(outbox, request.child(display_data(&bundle, Some(kind))));
            }
        }
        Output::Result(bundle) => {
            result = Some(bundle.plain().to_string());
            if !silent {
                send_iopub(outbox, request.child(execute_result(&bundle, count)));
            }
        }
        Output::Error(e) => {
            send_iopub(outbox, request.child(error_output(&e)));
            error = Some(e);
        }
    });
    let count = session.execution_count();
    if store_history && !code.trim().is_empty() {
        history.record(count, code, result);
    }
    let reply = match outcome {
        Outcome::Ok => ExecuteReply {
            status: ReplyStatus::Ok,
            execution_count: execution_count(count),
            payload,
            user_expressions: Some(Default::default()),
            error: None,
        },
        Outcome::Error | Outcome::Interrupted => {
            let error = error.unwrap_or_else(|| {
                // The session reports every failure; this only guards the protocol.
                let e = if outcome == Outcome::Interrupted {
                    CellError::new("Interrupted", "the cell was interrupted")
                } else {
                    CellError::new("Error", "the cell failed")
                };
                send_iopub(outbox, request.child(error_output(&e)));
                e
            });
            error_reply(&error, count)
        }
    };
    let executed = if outcome == Outcome::Ok {
        Executed::Ok
    } else {
        Executed::Failed { stop_on_error }
    };
    (executed, request.child(reply))
}

/// The reply to an execute request that was not run because an earlier cell failed.
pub fn aborted_reply(count: u32) -> ExecuteReply {
    ExecuteReply {
        status: ReplyStatus::Aborted,
        execution_count: execution_count(count),
        payload: Vec::new(),
        user_expressions: Some(Default::default()),
        error: None,
    }
}

fn send_iopub(outbox: &Outbox, message: JupyterMessage) {
    let _ = outbox.send(Outgoing::IoPub(message));
}

fn stream(outbox: &Outbox, request: &Arc<Request>, stream: Stream, text: String) {
    if !text.is_empty() {
        let _ = outbox.send(Outgoing::Stream {
            parent: request.clone(),
            stream,
            text,
        });
    }
}

fn execution_count(count: u32) -> ExecutionCount {
    ExecutionCount::new(count as usize)
}

/// A bundle as Jupyter media: every MIME type it has (`text/plain` always, `text/html`,
/// `image/svg+xml`, ...), each on its own. JSON types (`application/json`, `...+json`) carry
/// their text parsed as JSON when it parses. An entry the protocol crate will not take (a
/// data resource that is not one, say) goes as a plain string under its MIME type instead
/// of taking the whole bundle down with it.
pub fn media(bundle: &MimeBundle) -> Media {
    let content = bundle
        .0
        .iter()
        .flat_map(|(mime, data)| {
            let text = Value::String(data.clone());
            let value = match is_json_mime(mime) {
                true => serde_json::from_str(data).unwrap_or_else(|_| text.clone()),
                false => text.clone(),
            };
            let one = serde_json::Map::from_iter([(mime.clone(), value)]);
            match serde_json::from_value::<Media>(Value::Object(one)) {
                Ok(media) => media.content,
                Err(_) => vec![MediaType::Other((mime.clone(), text))],
            }
        })
        .collect();
    Media::new(content)
}

/// Whether `mime` carries JSON rather than text.
fn is_json_mime(mime: &str) -> bool {
    mime == "application/json" || mime.ends_with("+json")
}

/// A `display_data` of `bundle`, with `metadata` when given.
pub fn display_data(bundle: &MimeBundle, metadata: Option<Value>) -> DisplayData {
    DisplayData {
        data: media(bundle),
        metadata: match metadata {
            Some(Value::Object(map)) => map,
            _ => Default::default(),
        },
        transient: None,
    }
}

/// An `execute_result` of `bundle`, the value of cell `count`.
pub fn execute_result(bundle: &MimeBundle, count: u32) -> ExecuteResult {
    ExecuteResult {
        execution_count: execution_count(count),
        data: media(bundle),
        metadata: Default::default(),
        transient: Some(Transient::default()),
    }
}

/// The `error` message of a failed cell.
pub fn error_output(error: &CellError) -> ErrorOutput {
    ErrorOutput {
        ename: error.ename.clone(),
        evalue: error.evalue.clone(),
        traceback: traceback(error),
    }
}

/// The execute reply of a failed cell.
fn error_reply(error: &CellError, count: u32) -> ExecuteReply {
    ExecuteReply {
        status: ReplyStatus::Error,
        execution_count: execution_count(count),
        payload: Vec::new(),
        user_expressions: Some(Default::default()),
        error: Some(Box::new(ReplyError {
            ename: error.ename.clone(),
            evalue: error.evalue.clone(),
            traceback: traceback(error),
        })),
    }
}

/// The traceback lines Jupyter front ends show (instead of the name and value when it has
/// lines): the error's head in bold red, then its details, as [`CellError`] shapes them.
pub fn traceback(error: &CellError) -> Vec<String> {
    std::iter::once(format!("\x1b[1;31m{}\x1b[0m", error.head()))
        .chain(error.details())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::content_json;
    use crate::wire::tests::request;

    #[test]
    fn bundles_keep_every_mime_type() {
        let bundle = MimeBundle::text("tensor([1.])").with("text/html", "<table></table>");
        let r = request("execute_request", json!({"code": "x"}));
        let message = r.child(display_data(&bundle, None));
        assert_eq!(
            content_json(&message),
            json!({"data": {"text/plain": "tensor([1.])", "text/html": "<table></table>"},
                   "metadata": {}})
        );
        let rich = MimeBundle::text("timeline")
            .with("text/html", "<b>x</b>")
            .with("image/svg+xml", "<svg></svg>")
            .with("application/json", r#"{"a": [1, 2]}"#)
            .with("application/vnd.dataresource+json", "not a table");
        let message = r.child(display_data(&rich, None));
        assert_eq!(
            content_json(&message)["data"],
            json!({"text/plain": "timeline", "text/html": "<b>x</b>",
                   "image/svg+xml": "<svg></svg>", "application/json": {"a": [1, 2]},
                   "application/vnd.dataresource+json": "not a table"})
        );
        let message = r.child(execute_result(&rich, 2));
        assert_eq!(
            content_json(&message)["data"]["image/svg+xml"],
            "<svg></svg>"
        );
        let message = r.child(execute_result(&MimeBundle::text("3"), 7));
        assert_eq!(
            content_json(&message),
            json!({"execution_count": 7, "data": {"text/plain": "3"}, "metadata": {},
                   "transient": {}})
        );
        assert_eq!(message.header.msg_type, "execute_result");
    }

    #[test]
    fn replies_validate_as_jupyter_expects() {
        let ok = serde_json::to_value(ExecuteReply {
            status: ReplyStatus::Ok,
            execution_count: execution_count(2),
            payload: Vec::new(),
            user_expressions: Some(Default::default()),
            error: None,
        })
        .unwrap();
        assert_eq!(
            ok,
            json!({"status": "ok", "execution_count": 2, "payload": [], "user_expressions": {}})
        );
        let error = CellError::new("MagicError", "%nope is not a magic");
        let reply = serde_json::to_value(error_reply(&error, 3)).unwrap();
        assert_eq!(reply["status"], "error");
        assert_eq!(reply["ename"], "MagicError");
        assert_eq!(reply["evalue"], "%nope is not a magic");
        let aborted = serde_json::to_value(aborted_reply(3)).unwrap();
        assert_eq!(aborted["status"], "aborted");
    }

    #[test]
    fn tracebacks_lead_with_the_error_and_drop_repeats() {
        let error = CellError {
            ename: "CompileError".into(),
            evalue: "cannot find value `y`".into(),
            traceback: vec![
                "cannot find value `y`".into(),
                "error[E0425]: cannot find value `y`\n --> cell [2], line 1:1\n".into(),
            ],
        };
        assert_eq!(
            traceback(&error),
            [
                "\x1b[1;31mCompileError: cannot find value `y`\x1b[0m",
                " --> cell [2], line 1:1",
            ]
        );
        assert_eq!(
            traceback(&CellError::new("Interrupted", "stopped")).len(),
            1
        );
    }
}
