"""The Jupyter kernel: the Jupyter project's conformance suite (jupyter_kernel_test) and
protocol tests with jupyter_client (interrupt, restart, state, displays, stop_on_error,
unsigned messages, clients that leave).

The kernelspec `neuronlab` must be on Jupyter's path: scripts/test installs it into a
temporary prefix and sets JUPYTER_PATH. Without it, this module installs one itself from
NEURONLAB_KERNEL (default: target/debug/neuronlab-kernel) into a temporary prefix.

Each kernel gets its own XDG_DATA_HOME, so the history file is a temporary one. Rust cells
need the wasm32 toolchain; the first cell of a machine builds the standard library (about a
minute), so every kernel here runs a warm-up cell with a generous timeout first.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
from pathlib import Path
from queue import Empty
from typing import Any

import jupyter_kernel_test
import pytest
import zmq
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
from jupyter_client.manager import KernelManager, start_new_kernel
from jupyter_client.session import Session

REPO = Path(__file__).resolve().parents[2]
KERNEL_BIN = Path(os.environ.get("NEURONLAB_KERNEL", REPO / "target" / "debug" / "neuronlab-kernel"))
KERNEL_NAME = "neuronlab"
# A cell built from scratch (the first of a machine) takes about a minute.
BUILD_TIMEOUT = 600
# A cell once the standard library and the SDK are built.
CELL_TIMEOUT = 120


def _ensure_kernelspec() -> None:
    try:
        KernelSpecManager().get_kernel_spec(KERNEL_NAME)
        return
    except NoSuchKernel:
        pass
    if not KERNEL_BIN.is_file():
        raise RuntimeError(
            f"no kernelspec {KERNEL_NAME!r} and no {KERNEL_BIN}: run scripts/test, or "
            "`cargo build -p neuronlab-kernel` first"
        )
    prefix = tempfile.mkdtemp(prefix="neuronlab-kernelspec-")
    atexit.register(shutil.rmtree, prefix, True)
    subprocess.run([str(KERNEL_BIN), "install", "--prefix", prefix], check=True, capture_output=True)
    data = os.path.join(prefix, "share", "jupyter")
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [data, os.environ.get("JUPYTER_PATH")]))


_ensure_kernelspec()
_HISTORY_HOME = tempfile.mkdtemp(prefix="neuronlab-kernel-data-")
atexit.register(shutil.rmtree, _HISTORY_HOME, True)


def kernel_env() -> dict[str, str]:
    """The kernel's environment: this one, with a temporary data folder for its history."""
    return {**os.environ, "XDG_DATA_HOME": _HISTORY_HOME}


def run_cell(kc, code: str, timeout: float = CELL_TIMEOUT, **kw: Any) -> tuple[dict, list[dict]]:
    """Runs `code`; returns its reply's content and its iopub messages."""
    outputs: list[dict] = []
    reply = kc.execute_interactive(
        code, timeout=timeout, output_hook=outputs.append, allow_stdin=False, **kw
    )
    return reply["content"], outputs


def texts(outputs: list[dict], msg_type: str) -> str:
    """The text of every `msg_type` output, joined."""
    found = []
    for m in outputs:
        if m["msg_type"] != msg_type:
            continue
        content = m["content"]
        found.append(content["text"] if msg_type == "stream" else content["data"]["text/plain"])
    return "".join(found)


def shown(outputs: list[dict]) -> str:
    """Everything the outputs show as text: streams, displays and results."""
    return "".join(texts(outputs, kind) for kind in ("stream", "display_data", "execute_result"))


def warm_up(kc) -> None:
    """A first Rust cell, which may build the standard library and the SDK."""
    reply, outputs = run_cell(kc, "let warm_up = 1;", timeout=BUILD_TIMEOUT)
    assert reply["status"] == "ok", outputs


class NeuronlabKernelTests(jupyter_kernel_test.KernelTests):
    """jupyter_kernel_test's conformance suite, with every test that applies enabled."""

    kernel_name = KERNEL_NAME
    language_name = "rust"
    file_extension = ".rs"

    code_hello_world = 'println!("hello, world");'
    code_stderr = 'eprintln!("to stderr");'

    completion_samples = [
        {"text": "%he", "matches": {"%help"}},
        {"text": "%%wa", "matches": {"%%wat"}},
        {"text": "let y = matm", "matches": {"matmul"}},
    ]
    complete_code_samples = ["1 + 2", "let x = 1;", "%help", "fn f() -> i32 { 1 }"]
    incomplete_code_samples = ["fn f() {", "let v = vec![1,", "let s = \"open"]
    invalid_code_samples = ["let x = (1 + 2];", "fn f() { ) }"]

    # A panic: exactly one output, the error (its message is not also on stderr).
    code_generate_error = 'panic!("boom")'
    code_execute_result = [
        {"code": "1 + 2", "result": "3"},
        {"code": "6 * 7", "result": "42"},
    ]
    code_display_data = [{"code": "neuronlab::randn(&[2, 2])?.display()?;", "mime": "text/plain"}]

    code_history_pattern = "1 + ?"
    supported_history_operations = ("tail", "range", "search")

    code_inspect_sample = "matmul"

    # `%doc` answers with a pager payload; the SDK's clear_output sends clear_output.
    code_page_something = "%doc matmul"
    code_clear_output = "neuronlab::clear_output(false)?;"

    @classmethod
    def setUpClass(cls) -> None:
        cls.km, cls.kc = start_new_kernel(kernel_name=cls.kernel_name, env=kernel_env())
        try:
            warm_up(cls.kc)
        except BaseException:
            cls.tearDownClass()
            raise


@pytest.fixture
def kernel():
    km, kc = start_new_kernel(kernel_name=KERNEL_NAME, env=kernel_env())
    try:
        warm_up(kc)
        yield km, kc
    finally:
        kc.stop_channels()
        # Gracefully, so the session removes its cell crate (a kill would leave it behind).
        km.shutdown_kernel()


def wait_for_stream(kc, parent: str, needle: str, timeout: float = CELL_TIMEOUT) -> None:
    """Reads iopub until `needle` shows in a stream of request `parent`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=1)
        except Empty:
            continue
        if msg["parent_header"].get("msg_id") == parent and msg["msg_type"] == "stream":
            if needle in msg["content"]["text"]:
                return
    raise AssertionError(f"no {needle!r} on iopub within {timeout} s")


def shell_reply(kc, msg_id: str, timeout: float = CELL_TIMEOUT) -> dict:
    """The shell reply to `msg_id` (skipping replies to other requests)."""
    deadline = time.monotonic() + timeout
    while True:
        msg = kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") == msg_id:
            return msg


# A %%wat cell that prints, then spins: it needs no build.
WAT_LOOP = """%%wat
(module
  (import "neuronlab" "print" (func $print (param i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "spinning\\n")
  (func (export "neuronlab_abi_version") (result i32) (i32.const 0x10000))
  (func (export "run") (drop (call $print (i32.const 1) (i32.const 0) (i32.const 9))) (loop br 0)))"""


@pytest.mark.parametrize("how", ["message", "sigint"])
@pytest.mark.parametrize(
    "cell",
    [
        'println!("spinning");\nloop { std::hint::black_box(0); }',
        WAT_LOOP,
    ],
    ids=["rust-loop", "wat-loop"],
)
def test_an_interrupt_stops_a_runaway_cell_and_keeps_state(kernel, cell, how):
    km, kc = kernel
    reply, _ = run_cell(kc, "let kept = 41;")
    assert reply["status"] == "ok"
    msg_id = kc.execute(cell)
    wait_for_stream(kc, msg_id, "spinning")
    time.sleep(0.3)
    started = time.monotonic()
    if how == "message":
        # The kernelspec says interrupt_mode: message, so this is an interrupt_request.
        assert km.kernel_spec.interrupt_mode == "message"
        km.interrupt_kernel()
    else:
        km.signal_kernel(signal.SIGINT)
    reply = shell_reply(kc, msg_id, timeout=30)
    assert time.monotonic() - started < 10
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "Interrupted", reply["content"]
    reply, outputs = run_cell(kc, "kept + 1")
    assert reply["status"] == "ok", outputs
    assert texts(outputs, "execute_result") == "42"


@pytest.mark.parametrize(
    "cell, ename, evalue, at",
    [
        ('let v = vec![1];\nlet x = v[3];', "Panic", "index out of bounds", r"cell\[\d+\]:2:10"),
        # `?` on an op that fails: named after the op error, at the call's line, after ops ran.
        (
            "let a = neuronlab::randn(&[2, 3])?;\nlet b = neuronlab::randn(&[4])?;\nlet c = a.add(&b)?;",
            "OpError",
            "cannot be broadcast",
            r"cell\[\d+\]:3:11",
        ),
        ('let y: i32 = "text";', "CompileError", "mismatched types", r"cell \[\d+\], line 1:14"),
        ("let x = ;", "SyntaxError", "", r"cell \[\d+\], line 1"),
    ],
    ids=["panic", "op-error", "compile-error", "syntax-error"],
)
def test_a_failing_cell_has_one_output_named_after_its_cause(kernel, cell, ename, evalue, at):
    _, kc = kernel
    reply, messages = run_cell(kc, cell)
    outputs = [m for m in messages if m["msg_type"] not in ("status", "execute_input")]
    assert [m["msg_type"] for m in outputs] == ["error"], outputs
    error = outputs[0]["content"]
    assert reply["status"] == "error" and reply["ename"] == error["ename"] == ename, error
    assert evalue in error["evalue"], error
    traceback = "\n".join(error["traceback"])
    assert re.search(at, traceback), traceback
    # The report is the user's: no standard-library frames, no mangled names, and each
    # compiler header once.
    assert "rust_abort" not in traceback and "_RNv" not in traceback, traceback
    assert traceback.count("mismatched types") <= 1, traceback
    if ename == "OpError":
        assert "before it stopped, the cell ran: 2 ops" in traceback, traceback


def test_a_first_build_shows_its_progress_in_one_updating_display(tmp_path):
    """On a machine (here: a cache folder) that never built a cell, the first cell builds
    the standard library and the SDK; its progress is one display, updated in place, not
    stderr."""
    env = {**kernel_env(), "NEURONLAB_CACHE_DIR": str(tmp_path / "cache")}
    km, kc = start_new_kernel(kernel_name=KERNEL_NAME, env=env)
    try:
        reply, messages = run_cell(kc, "let first = 1;", timeout=BUILD_TIMEOUT)
        assert reply["status"] == "ok", messages
        assert not [m for m in messages if m["msg_type"] == "stream"], messages
        shown = [m for m in messages if m["msg_type"] == "display_data"]
        assert len(shown) == 1, messages
        display_id = shown[0]["content"]["transient"]["display_id"]
        updates = [m["content"] for m in messages if m["msg_type"] == "update_display_data"]
        assert updates and all(u["transient"]["display_id"] == display_id for u in updates)
        texts_shown = [shown[0]["content"]["data"]["text/plain"]] + [
            u["data"]["text/plain"] for u in updates
        ]
        counts = [tuple(map(int, m.groups())) for t in texts_shown if (m := re.search(r"(\d+)/(\d+) crates", t))]
        assert counts, texts_shown
        total = counts[0][1]
        assert all(t == total for _, t in counts) and total > 10, counts
        assert [d for d, _ in counts] == sorted(d for d, _ in counts), counts
        assert re.search(rf"done, {total} crates in \d+ s$", texts_shown[-1]), texts_shown[-1]
        assert "<progress" in updates[-1]["data"]["text/html"]
        # Built once: the next cell shows no progress at all.
        reply, messages = run_cell(kc, "first + 1")
        assert reply["status"] == "ok"
        assert not [m for m in messages if m["msg_type"] in ("display_data", "stream")], messages
    finally:
        kc.stop_channels()
        km.shutdown_kernel()


def test_a_restart_gives_a_fresh_session_and_keeps_history(kernel):
    km, kc = kernel
    reply, _ = run_cell(kc, "let before = 1;")
    assert reply["status"] == "ok"
    reply, _ = run_cell(kc, "1 + 2")
    old_count = reply["execution_count"]
    assert old_count >= 2
    kc.history(hist_access_type="tail", n=1, output=True, raw=True)
    [[old_session, line, (code, output)]] = kc.get_shell_msg(timeout=10)["content"]["history"]
    assert (line, code, output) == (old_count, "1 + 2", "3")

    started = time.monotonic()
    km.restart_kernel(now=False)
    # The kernel exits on shutdown_request(restart=True) at once: no wait for a kill.
    assert time.monotonic() - started < 4
    kc.wait_for_ready(timeout=60)

    reply, outputs = run_cell(kc, "%vars")
    assert reply["execution_count"] == 1
    assert "before" not in shown(outputs)
    reply, outputs = run_cell(kc, "before + 1")
    assert reply["status"] == "error"
    # The history file outlives the process; the new session is numbered after the old one.
    kc.history(hist_access_type="tail", n=3, output=False, raw=True)
    history = kc.get_shell_msg(timeout=10)["content"]["history"]
    assert [old_session, old_count, "1 + 2"] in history
    assert history[-1][0] == old_session + 1


def test_variables_persist_across_cells(kernel):
    _, kc = kernel
    reply, _ = run_cell(kc, "let w = neuronlab::ones(&[2, 3])?;\nlet steps = 20;")
    assert reply["status"] == "ok"
    reply, outputs = run_cell(kc, "steps * 2 + w.shape().len() as i32")
    assert reply["status"] == "ok", outputs
    assert texts(outputs, "execute_result") == "42"
    reply, outputs = run_cell(kc, "%vars")
    listed = texts(outputs, "display_data")
    assert re.search(r"^w +Tensor +\[2, 3\] +f32", listed, re.M), listed
    assert re.search(r"^steps +i32 .* 20$", listed, re.M), listed


def test_a_tensor_displays_and_the_summary_follows(kernel):
    _, kc = kernel
    reply, outputs = run_cell(kc, "let t = neuronlab::ones(&[2, 2])?;\nt.display()?;\nt")
    assert reply["status"] == "ok", outputs
    kinds = [m["msg_type"] for m in outputs if m["msg_type"] not in ("status", "execute_input")]
    assert kinds == ["display_data", "execute_result", "display_data"], kinds
    display, result, summary = (m for m in outputs if m["msg_type"] in kinds)
    assert display["content"]["data"]["text/plain"].startswith("tensor([[1., 1.]")
    assert result["content"]["data"]["text/plain"] == display["content"]["data"]["text/plain"]
    assert result["content"]["execution_count"] == reply["execution_count"]
    assert summary["content"]["metadata"] == {"neuronlab": {"kind": "summary"}}
    assert "ops" in summary["content"]["data"]["text/plain"]


def test_rich_displays_carry_html_and_svg(kernel):
    _, kc = kernel
    reply, outputs = run_cell(kc, "let t = neuronlab::ones(&[2, 3])?;\nt.exp()?.display()?;")
    assert reply["status"] == "ok", outputs
    displays = [m["content"] for m in outputs if m["msg_type"] == "display_data"]
    tensor = next(d for d in displays if d["metadata"] == {})
    assert tensor["data"]["text/plain"].startswith("tensor([[2.7183, 2.7183, 2.7183]")
    html = tensor["data"]["text/html"]
    assert "<table" in html and "tensor f32[2, 3] · neuron:0 · 24 B" in html, html
    assert ">2.7183</td>" in html, html
    summary = next(d for d in displays if d["metadata"] == {"neuronlab": {"kind": "summary"}})
    assert ">ops</span> " in summary["data"]["text/html"], summary

    reply, outputs = run_cell(kc, "%timeline")
    assert reply["status"] == "ok", outputs
    [timeline] = [m["content"] for m in outputs if m["msg_type"] == "display_data"]
    assert "], the last that did device work: modeled device time " in timeline["data"]["text/plain"]
    svg = timeline["data"]["image/svg+xml"]
    assert svg.startswith("<svg ") and "modeled device time (µs)" in svg, svg[:200]
    assert "neuron:0" in svg


def test_a_guest_plot_is_svg_with_labelled_axes(kernel):
    _, kc = kernel
    code = """let growing = [1, 2, 3, 4, 5];
plot::line("compiles per step")
    .x_axis("step", "")
    .y_axis("modeled time", "µs")
    .series("growing", &growing)
    .series("padded", &[1, 1, 1, 1, 1])
    .show()?;"""
    reply, outputs = run_cell(kc, code)
    assert reply["status"] == "ok", outputs
    [plot] = [
        m["content"]
        for m in outputs
        if m["msg_type"] == "display_data" and "image/svg+xml" in m["content"]["data"]
    ]
    svg = plot["data"]["image/svg+xml"]
    assert svg.startswith("<svg ") and svg.rstrip().endswith("</svg>"), svg[:200]
    for label in ("compiles per step", "step", "modeled time (µs)", "growing", "padded"):
        assert f">\n{label}\n</text>" in svg or f">{label}</text>" in svg, label
    assert plot["data"]["text/plain"].startswith("line plot 'compiles per step'")


def test_a_display_id_updates_in_place(kernel):
    _, kc = kernel
    code = """let progress = DisplayHandle::new("progress");
progress.show("step 0")?;
for step in 1..=3 {
    progress.update(&format!("step {step}"))?;
}"""
    reply, outputs = run_cell(kc, code)
    assert reply["status"] == "ok", outputs
    shown = [
        (m["msg_type"], m["content"]["transient"]["display_id"], m["content"]["data"]["text/plain"])
        for m in outputs
        if m["msg_type"] in ("display_data", "update_display_data")
        and m["content"].get("transient", {}).get("display_id")
    ]
    assert shown == [
        ("display_data", "progress", "step 0"),
        ("update_display_data", "progress", "step 1"),
        ("update_display_data", "progress", "step 2"),
        ("update_display_data", "progress", "step 3"),
    ], shown


def test_stop_on_error_aborts_queued_cells(kernel):
    _, kc = kernel
    # The failing cell builds (about a second), so the next request is queued by then.
    failing = kc.execute('let y: i32 = "text";')
    queued = kc.execute("let after = 1;")
    first, second = shell_reply(kc, failing), shell_reply(kc, queued)
    assert first["content"]["status"] == "error"
    assert first["content"]["ename"] == "CompileError"
    assert second["content"]["status"] == "aborted"
    # With stop_on_error false, the next cell runs.
    failing = kc.execute('let y: i32 = "text";', stop_on_error=False)
    queued = kc.execute("2 + 2")
    assert shell_reply(kc, failing)["content"]["status"] == "error"
    assert shell_reply(kc, queued)["content"]["status"] == "ok"


def test_silent_cells_send_no_result_and_no_history(kernel):
    _, kc = kernel
    reply, outputs = run_cell(kc, "100 + 1", silent=True)
    assert reply["status"] == "ok"
    assert not [m for m in outputs if m["msg_type"] in ("execute_input", "execute_result")]
    run_cell(kc, "5 + 5", store_history=False)
    kc.history(hist_access_type="search", pattern="*+ ?", output=False, raw=True)
    inputs = [h[2] for h in kc.get_shell_msg(timeout=10)["content"]["history"]]
    assert "100 + 1" not in inputs and "5 + 5" not in inputs


def test_requests_without_a_valid_signature_are_dropped(kernel):
    km, kc = kernel
    info = km.get_connection_info(session=False)
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(f"{info['transport']}://{info['ip']}:{info['shell_port']}")
    try:
        content = {"code": "let hacked = 1;", "silent": False, "store_history": True,
                   "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}
        # Signed with the wrong key, and not signed at all.
        Session(key=b"not the key").send(sock, "execute_request", content)
        Session(key=b"").send(sock, "execute_request", content)
        # Malformed: no delimiter; a delimiter with too few frames; a header that is not JSON.
        sock.send_multipart([b"garbage"])
        sock.send_multipart([b"<IDS|MSG>", b""])
        signed = Session(key=info["key"])
        parts = [b"{not json", b"{}", b"{}", b"{}"]
        sock.send_multipart([b"<IDS|MSG>", signed.sign(parts), *parts])
        # A correctly signed request of a type the kernel does not know gets an error reply.
        signed.send(sock, "frobnicate_request", {})
        frames = sock.recv_multipart() if sock.poll(10_000) else None
        assert frames is not None, "no reply to a signed unknown request"
        reply = signed.deserialize(signed.feed_identities(frames)[1])
        assert reply["msg_type"] == "frobnicate_reply"
        assert reply["content"]["status"] == "error"
    finally:
        sock.close()
    kc.kernel_info()
    assert kc.get_shell_msg(timeout=10)["msg_type"] == "kernel_info_reply"
    reply, outputs = run_cell(kc, "hacked")
    assert reply["status"] == "error", "an unsigned request ran"


def test_a_client_that_leaves_does_not_stop_the_kernel(kernel):
    km, kc = kernel
    other = km.client()
    other.start_channels()
    other.wait_for_ready(timeout=30)
    other.execute('println!("bye");\nlet mut n = 0u64;\nfor i in 0..2_000_000u64 { n += i; }\nn')
    other.stop_channels()
    reply, outputs = run_cell(kc, "1 + 1")
    assert reply["status"] == "ok"
    assert texts(outputs, "execute_result") == "2"
    kc.comm_info()
    comm = kc.get_shell_msg(timeout=10)["content"]
    assert comm == {"status": "ok", "comms": {}}
    assert km.is_alive()


def test_the_heartbeat_echoes(kernel):
    km, _ = kernel
    info = km.get_connection_info(session=False)
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.linger = 0
    sock.connect(f"{info['transport']}://{info['ip']}:{info['hb_port']}")
    try:
        for ping in (b"ping", b"\x00binary\xff"):
            sock.send(ping)
            assert sock.poll(10_000), "no heartbeat"
            assert sock.recv() == ping
    finally:
        sock.close()


def test_shutdown_exits_promptly():
    km = KernelManager(kernel_name=KERNEL_NAME)
    km.start_kernel(env=kernel_env())
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        started = time.monotonic()
        km.shutdown_kernel(now=False)
        # jupyter_client kills a kernel still alive after 5 s; this one leaves by itself.
        assert time.monotonic() - started < 4
        assert not km.is_alive()
    finally:
        kc.stop_channels()


if __name__ == "__main__":
    unittest.main()
