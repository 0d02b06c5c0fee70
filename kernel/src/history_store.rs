//! The kernel's input history, answered to `history_request` and kept across restarts in a
//! JSON-lines file: `$XDG_DATA_HOME/neuronlab/kernel-history.jsonl` (else
//! `~/.local/share/neuronlab/kernel-history.jsonl`).
//!
//! As in IPython, every kernel process is a new *session*, numbered one more than the
//! largest in the file, and a cell's *line* is its execution count. The file holds one JSON
//! object per line: `{"session": S}` when a session starts, then
//! `{"session": S, "line": N, "input": "...", "output": "..."}` for each cell run with
//! `store_history` (`output` is the `text/plain` of the cell's result, or null). Lines that
//! do not parse are skipped, so a file written by a newer kernel or cut short still loads.
//! When the file cannot be written, history is kept in memory for this session and the
//! problem is logged once.

use std::io::Write;
use std::path::{Path, PathBuf};

use neuronlab_core::paths::DataFile;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::log;

/// One cell of the history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The kernel session (process) it ran in.
    pub session: u32,
    /// Its execution count in that session.
    pub line: u32,
    /// The cell's text.
    pub input: String,
    /// The `text/plain` of its result, if it had one.
    pub output: Option<String>,
}

/// A line of the file: a session start, or an entry.
#[derive(Deserialize)]
struct FileLine {
    session: u32,
    line: Option<u32>,
    input: Option<String>,
    #[serde(default)]
    output: Option<String>,
}

/// The history of every session in the file, and this session's number.
pub struct History {
    path: Option<PathBuf>,
    session: u32,
    entries: Vec<Entry>,
    /// Whether a write already failed (it is logged once).
    write_failed: bool,
}

/// The default history file, or `None` when neither `XDG_DATA_HOME` nor `HOME` is an
/// absolute path.
pub fn default_path() -> Option<PathBuf> {
    DataFile::KernelHistory.path()
}

impl History {
    /// Loads the file at `path` (if any) and starts a new session in it.
    pub fn open(path: Option<PathBuf>) -> History {
        let mut entries = Vec::new();
        let mut last_session = 0;
        if let Some(text) = path
            .as_deref()
            .and_then(|p| std::fs::read_to_string(p).ok())
        {
            for line in text.lines() {
                let Ok(parsed) = serde_json::from_str::<FileLine>(line) else {
                    continue;
                };
                last_session = last_session.max(parsed.session);
                if let (Some(line), Some(input)) = (parsed.line, parsed.input) {
                    entries.push(Entry {
                        session: parsed.session,
                        line,
                        input,
                        output: parsed.output,
                    });
                }
            }
        }
        let mut history = History {
            path,
            session: last_session + 1,
            entries,
            write_failed: false,
        };
        history.append(&serde_json::json!({ "session": history.session }));
        history
    }

    /// A history kept in memory only.
    pub fn in_memory() -> History {
        History {
            path: None,
            session: 1,
            entries: Vec::new(),
            write_failed: false,
        }
    }

    /// This session's number.
    pub fn session(&self) -> u32 {
        self.session
    }

    /// Records a cell of this session.
    pub fn record(&mut self, line: u32, input: &str, output: Option<String>) {
        let entry = Entry {
            session: self.session,
            line,
            input: input.to_string(),
            output,
        };
        let json = serde_json::to_value(&entry).unwrap_or(Value::Null);
        self.append(&json);
        self.entries.push(entry);
    }

    /// Appends one line to the file (one write, so sessions writing at once do not mix).
    fn append(&mut self, json: &Value) {
        let Some(path) = &self.path else { return };
        let result = write_line(path, &format!("{json}\n"));
        if let Err(e) = result {
            if !self.write_failed {
                self.write_failed = true;
                log!(
                    "history is kept in memory only: cannot write {}: {e}",
                    path.display()
                );
            }
        }
    }

    /// The last `n` cells, of any session, oldest first.
    pub fn tail(&self, n: usize) -> Vec<&Entry> {
        let skip = self.entries.len().saturating_sub(n);
        self.entries[skip..].iter().collect()
    }

    /// The cells of `session` with `start <= line < stop` (no `stop`: to the end). A session
    /// of 0 or less counts back from this one, as IPython's does (0 is this session).
    pub fn range(&self, session: i64, start: i64, stop: Option<i64>) -> Vec<&Entry> {
        let session = if session <= 0 {
            i64::from(self.session) + session
        } else {
            session
        };
        self.entries
            .iter()
            .filter(|e| i64::from(e.session) == session)
            .filter(|e| i64::from(e.line) >= start && stop.is_none_or(|s| i64::from(e.line) < s))
            .collect()
    }

    /// The cells whose whole input matches the glob `pattern` (`*`, `?`, `[...]`, case
    /// sensitive, as IPython's SQLite `GLOB`), oldest first: with `unique`, only the latest
    /// cell of each distinct input; with `n`, only the last `n`.
    pub fn search(&self, pattern: &str, n: Option<usize>, unique: bool) -> Vec<&Entry> {
        let pattern: Vec<char> = pattern.chars().collect();
        let mut found: Vec<&Entry> = Vec::new();
        for entry in self.entries.iter().rev() {
            let text: Vec<char> = entry.input.chars().collect();
            if !glob_match(&pattern, &text) {
                continue;
            }
            if unique && found.iter().any(|f| f.input == entry.input) {
                continue;
            }
            found.push(entry);
            if n.is_some_and(|n| found.len() >= n) {
                break;
            }
        }
        found.reverse();
        found
    }
}

/// Appends `line` to the file at `path`, creating its folder.
fn write_line(path: &Path, line: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    file.write_all(line.as_bytes())
}

/// Whether all of `text` matches `pattern`: `*` any run of characters, `?` one character,
/// `[abc]`, `[a-z]` and `[^abc]` one character of (or not of) a set; anything else itself.
pub fn glob_match(pattern: &[char], text: &[char]) -> bool {
    // Iterative matching with one backtrack point for the last `*`.
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() {
            match pattern[p] {
                '*' => {
                    star = Some((p, t));
                    p += 1;
                    continue;
                }
                '?' => {
                    p += 1;
                    t += 1;
                    continue;
                }
                '[' => {
                    if let Some((matched, next)) = class_match(&pattern[p..], text[t]) {
                        if matched {
                            p += next;
                            t += 1;
                            continue;
                        }
                    } else if text[t] == '[' {
                        // An unclosed `[` is itself.
                        p += 1;
                        t += 1;
                        continue;
                    }
                }
                c if c == text[t] => {
                    p += 1;
                    t += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, st)) => {
                p = sp + 1;
                t = st + 1;
                star = Some((sp, st + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

/// Whether `c` is in the class that `pattern` (from its `[`) opens, and the class's length;
/// `None` when the class is not closed.
fn class_match(pattern: &[char], c: char) -> Option<(bool, usize)> {
    let mut i = 1;
    let negated = pattern.get(i) == Some(&'^');
    if negated {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    loop {
        let &x = pattern.get(i)?;
        if x == ']' && !first {
            return Some((matched != negated, i + 1));
        }
        first = false;
        if pattern.get(i + 1) == Some(&'-') && pattern.get(i + 2).is_some_and(|&y| y != ']') {
            let y = pattern[i + 2];
            matched |= x <= c && c <= y;
            i += 3;
        } else {
            matched |= x == c;
            i += 1;
        }
    }
}

/// A history entry as `history_reply` lists it: `[session, line, input]`, or with `output`,
/// `[session, line, [input, output]]`.
pub fn reply_entry(entry: &Entry, output: bool) -> Value {
    if output {
        serde_json::json!([entry.session, entry.line, [entry.input, entry.output]])
    } else {
        serde_json::json!([entry.session, entry.line, entry.input])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(p: &str, t: &str) -> bool {
        glob_match(
            &p.chars().collect::<Vec<_>>(),
            &t.chars().collect::<Vec<_>>(),
        )
    }

    #[test]
    fn globs_match_whole_inputs() {
        assert!(glob("1 + *", "1 + 2"));
        assert!(glob("*", ""));
        assert!(glob("*+*", "1 + 2"));
        assert!(!glob("1 +", "1 + 2"));
        assert!(glob("?? 2*", "1+ 2;"));
        assert!(glob("a*b*c", "aXbYbZc"));
        assert!(!glob("a*b*c", "aXbYbZ"));
        assert!(glob("[0-9] + [^a]", "7 + 2"));
        assert!(!glob("[0-9] + [^2]", "7 + 2"));
        assert!(glob("[]]", "]"));
        assert!(glob("[ab", "[ab"));
        assert!(!glob("Let*", "let x"));
        assert!(glob("*é?", "café!"));
    }

    fn temp_file(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "neuronlab-kernel-history-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir.join("neuronlab").join("kernel-history.jsonl")
    }

    #[test]
    fn sessions_persist_and_number_up() {
        let path = temp_file("persist");
        let mut first = History::open(Some(path.clone()));
        assert_eq!(first.session(), 1);
        first.record(1, "let x = 1;", None);
        first.record(2, "1 + 2", Some("3".into()));
        drop(first);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"not json\n{\"session\": 1, \"line\": 3}\n")
            .unwrap();
        let mut second = History::open(Some(path.clone()));
        assert_eq!(second.session(), 2);
        second.record(1, "1 + 2", Some("3".into()));
        let tail: Vec<(u32, u32, &str)> = second
            .tail(10)
            .iter()
            .map(|e| (e.session, e.line, e.input.as_str()))
            .collect();
        assert_eq!(
            tail,
            [(1, 1, "let x = 1;"), (1, 2, "1 + 2"), (2, 1, "1 + 2")]
        );
        assert_eq!(second.tail(1).len(), 1);
        // Session 0 is this one, -1 the one before.
        assert_eq!(second.range(0, 1, None).len(), 1);
        assert_eq!(second.range(-1, 2, Some(3))[0].input, "1 + 2");
        assert_eq!(second.range(1, 1, Some(2))[0].line, 1);
        assert!(second.range(1, 3, None).is_empty());
        assert_eq!(History::open(Some(path.clone())).session(), 3);
        let _ = std::fs::remove_dir_all(path.parent().unwrap().parent().unwrap());
    }

    #[test]
    fn search_keeps_the_latest_and_the_last_n() {
        let mut h = History::in_memory();
        for (i, code) in ["1 + 2", "let y = 2;", "1 + 2", "1 + 3", "1 + 2"]
            .iter()
            .enumerate()
        {
            h.record(i as u32 + 1, code, None);
        }
        let lines = |v: Vec<&Entry>| v.iter().map(|e| e.line).collect::<Vec<_>>();
        assert_eq!(lines(h.search("1 + *", None, false)), [1, 3, 4, 5]);
        assert_eq!(lines(h.search("1 + *", None, true)), [4, 5]);
        assert_eq!(lines(h.search("1 + 2", Some(2), false)), [3, 5]);
        assert_eq!(lines(h.search("1 + 2", None, true)), [5]);
        assert!(h.search("nothing", None, false).is_empty());
    }

    #[test]
    fn reply_entries_have_three_items() {
        let e = Entry {
            session: 4,
            line: 2,
            input: "1 + 2".into(),
            output: Some("3".into()),
        };
        assert_eq!(reply_entry(&e, false), serde_json::json!([4, 2, "1 + 2"]));
        assert_eq!(
            reply_entry(&e, true),
            serde_json::json!([4, 2, ["1 + 2", "3"]])
        );
    }

    #[test]
    fn an_unwritable_file_keeps_history_in_memory() {
        let mut h = History::open(Some(PathBuf::from("/proc/no/such/dir/history.jsonl")));
        h.record(1, "1", None);
        assert_eq!(h.tail(5).len(), 1);
    }
}
