//! `history_request`: `tail`, `range` and `search` over the [`History`].

use serde_json::{json, Value};

use crate::history_store::{reply_entry, History};
use crate::wire::Request;

/// How many cells `tail` and `search` give when the request says no `n`.
const DEFAULT_N: usize = 1000;

/// The content of the `history_reply` to `request`.
pub fn reply(history: &History, request: &Request) -> Value {
    let output = request.flag("output", false);
    let n = request.number("n").map(|n| usize::try_from(n).unwrap_or(0));
    let entries = match request.text("hist_access_type") {
        "tail" => history.tail(n.unwrap_or(DEFAULT_N)),
        "range" => history.range(
            request.number("session").unwrap_or(0),
            request.number("start").unwrap_or(1),
            request.number("stop"),
        ),
        "search" => {
            let pattern = match request.text("pattern") {
                "" => "*",
                p => p,
            };
            history.search(pattern, n, request.flag("unique", false))
        }
        other => {
            return json!({
                "status": "error",
                "ename": "HistoryError",
                "evalue": format!("hist_access_type '{other}' is not tail, range or search"),
                "traceback": [],
                "history": [],
            })
        }
    };
    let history: Vec<Value> = entries.iter().map(|e| reply_entry(e, output)).collect();
    json!({"status": "ok", "history": history})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::tests::request;

    #[test]
    fn tail_range_and_search_answer_as_ipython_does() {
        let mut h = History::in_memory();
        h.record(1, "let x = 1;", None);
        h.record(2, "1 + 2", Some("3".into()));
        h.record(3, "1 + 2", Some("3".into()));
        let ask = |content: Value| reply(&h, &request("history_request", content));
        let tail = ask(json!({"hist_access_type": "tail", "n": 2, "output": false, "raw": true}));
        assert_eq!(tail["history"], json!([[1, 2, "1 + 2"], [1, 3, "1 + 2"]]));
        let tail = ask(json!({"hist_access_type": "tail", "n": 1, "output": true, "raw": true}));
        assert_eq!(tail["history"], json!([[1, 3, ["1 + 2", "3"]]]));
        let range = ask(
            json!({"hist_access_type": "range", "session": 1, "start": 1, "stop": 2,
                               "output": false, "raw": true}),
        );
        assert_eq!(range["history"], json!([[1, 1, "let x = 1;"]]));
        let search = ask(json!({"hist_access_type": "search", "pattern": "1 + ?",
                                "unique": true, "output": false, "raw": true}));
        assert_eq!(search["history"], json!([[1, 3, "1 + 2"]]));
        let search = ask(json!({"hist_access_type": "search", "pattern": "*", "n": 2,
                                "output": false, "raw": true}));
        assert_eq!(search["history"].as_array().unwrap().len(), 2);
        let bad = ask(json!({"hist_access_type": "everything"}));
        assert_eq!(bad["status"], "error");
    }
}
