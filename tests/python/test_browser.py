"""The notebooks as a researcher meets them: JupyterLab in a real browser (Debian's chromium,
driven by Playwright), every notebook opened and run top to bottom, then completion, Shift-Tab
inspection and the interrupt of a runaway cell in a notebook of its own.

What is asserted is what a person looking at the page would see: no error output except in
cells tagged `raises-exception`, tensors as HTML tables, plots and timelines as SVG with their
labels, a completion list, an inspection tooltip, and state kept after an interrupt. A full-page
screenshot of each notebook goes to target/browser/ for a person to look at.

JupyterLab serves a temporary copy of notebooks/ (the experiments linked, a fresh scratch
folder), with cell virtualisation off so every cell is in the page, and its own settings and
workspace folders so nothing of the user's is read or written. The kernelspec comes from
test_kernel's setup.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
from playwright.sync_api import Page, sync_playwright

import test_kernel

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
SHOTS = REPO / "target" / "browser"
CHROMIUM = os.environ.get("NEURONLAB_CHROMIUM", "/usr/bin/chromium")
# How long a whole notebook may take to run (06 fine-tunes on 8 ranks).
NOTEBOOK_TIMEOUT = 600
# How long the page may take to answer something a person does (a key, a click).
UI_TIMEOUT = 30
# The notebook in front (JupyterLab keeps other open panels in the page, hidden).
VISIBLE = ".jp-NotebookPanel:not(.lm-mod-hidden)"

# What each notebook shows besides text: how many tensors and tables as HTML at least, and
# labels its SVG figures carry (each label must be in some SVG of the notebook).
EXPECTED = {
    "01-eager-basics": {"tables": 5, "svg_labels": ["modeled device time", "neuron:0", "mul"]},
    "02-recompilation-lab": {
        "tables": 2,
        "svg_labels": ["Compiles of the decode step", "growing", "padded"],
    },
    "03-collectives": {"tables": 2, "svg_labels": ["modeled device time", "neuron:3", "all_reduce"]},
    "04-sandbox": {"tables": 0, "svg_labels": []},
    "05-generation": {
        "tables": 1,
        "svg_labels": ["Modeled device time per generated token", "static cache", "dynamic cache"],
    },
    "06-fine-tuning": {"tables": 3, "svg_labels": ["loss per step", "backward", "neuron:7"]},
    "07-training": {"tables": 3, "svg_labels": ["train-mlp, eager: loss per step", "backward"]},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_settings(folder: Path) -> None:
    """JupyterLab settings for a test: every cell rendered (no windowing), no news checks."""
    settings = {
        "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
            "fetchNews": "false",
            "checkForUpdates": False,
        },
    }
    for name, value in settings.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on a copy of the notebooks: yields (base url, token, root)."""
    root = tmp_path_factory.mktemp("lab")
    for notebook in NOTEBOOKS.glob("*.ipynb"):
        shutil.copy(notebook, root)
    (root / "experiments").symlink_to(NOTEBOOKS / "experiments")
    (root / "scratch").mkdir()
    config = tmp_path_factory.mktemp("lab-config")
    write_settings(config / "settings")
    token = secrets.token_hex(16)
    port = free_port()
    env = {
        **test_kernel.kernel_env(),
        "JUPYTERLAB_SETTINGS_DIR": str(config / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(config / "workspaces"),
        "JUPYTER_RUNTIME_DIR": str(config / "runtime"),
    }
    log = open(config / "jupyterlab.log", "w")
    server = subprocess.Popen(
        [
            sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}",
            "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}", "--LabApp.news_url=", "--allow-root",
        ],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2):
                break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                log.close()
                pytest.fail("JupyterLab did not start:\n" + (config / "jupyterlab.log").read_text())
            time.sleep(0.25)
    yield url, token, root
    server.terminate()
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()
    log.close()


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        # As root, chromium needs its sandbox off; the pages are the test's own.
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def api(lab, method: str, path: str):
    """A call of the Jupyter server's REST API; returns the decoded JSON answer, if any."""
    url, token, _ = lab
    request = urllib.request.Request(
        f"{url}/api/{path}", method=method, headers={"Authorization": f"token {token}"}
    )
    with urllib.request.urlopen(request, timeout=UI_TIMEOUT) as answer:
        body = answer.read()
    return json.loads(body) if body else None


@pytest.fixture
def page(browser, lab):
    """A page of its own; afterwards the kernels it started are shut down."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(UI_TIMEOUT * 1000)
    yield page
    context.close()
    for session in api(lab, "GET", "sessions"):
        api(lab, "DELETE", f"sessions/{session['id']}")


def open_notebook(page: Page, lab, name: str) -> None:
    """Opens `name` alone in a workspace of its own and waits for its kernel to be idle."""
    url, token, _ = lab
    page.goto(f"{url}/lab/workspaces/{name}/tree/{name}.ipynb?reset&token={token}")
    page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell")
    wait_idle(page, UI_TIMEOUT * 4)


def wait_idle(page: Page, timeout: float) -> None:
    """Waits until the status bar says the notebook's neuronlab kernel is idle, as a person
    would: before its kernel connects, the notebook's own indicator already reads idle."""
    page.wait_for_function(
        """() => [...document.querySelectorAll('.jp-StatusBar-Item')]
            .some(item => /^neuronlab .*\\| Idle$/.test(item.textContent.trim()))""",
        timeout=timeout * 1000,
    )


def prompts(page: Page) -> list[str]:
    """The input prompts of the notebook's code cells: `[3]:`, `[*]:` or `[ ]:`."""
    return page.evaluate(
        f"() => [...document.querySelectorAll('{VISIBLE} .jp-CodeCell .jp-InputPrompt')]"
        ".map(p => p.textContent)"
    )


def run_all(page: Page, name: str, timeout: float) -> None:
    """Runs every cell from the Run menu and waits until each code cell has its count."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
    deadline = time.monotonic() + timeout
    while True:
        shown = prompts(page)
        if shown and all(re.search(r"\[\d+\]", p) for p in shown):
            break
        if time.monotonic() > deadline:
            screenshot(page, f"{name}-timeout")
            pytest.fail(f"{name}: not every cell ran in {timeout} s; prompts: {shown}")
        time.sleep(0.5)
    wait_idle(page, UI_TIMEOUT)


def screenshot(page: Page, name: str) -> None:
    """A picture of the whole notebook: the window grown to the notebook's height first."""
    height = page.evaluate(
        """() => {
            const n = document.querySelector('%s .jp-WindowedPanel-outer');
            return n ? n.scrollHeight : document.body.scrollHeight;
        }""" % VISIBLE
    )
    page.set_viewport_size({"width": 1280, "height": min(int(height) + 200, 30000)})
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})


def cell_outputs(page: Page) -> list[dict]:
    """Per code cell of the notebook: its stderr and error texts, its HTML tables, the text of each
    SVG it shows. JupyterLab shows image/svg+xml as an <img> of a data URL: the SVG's text is
    read from the URL, and an image the browser could not draw counts as none."""
    return page.evaluate(
        """() => [...document.querySelectorAll('%s .jp-CodeCell')].map(cell => ({
            errors: [...cell.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
                .map(o => o.textContent),
            tables: cell.querySelectorAll('.jp-RenderedHTMLCommon table').length,
            svgs: [...cell.querySelectorAll('.jp-OutputArea-output svg')].map(s => s.textContent).concat(
                [...cell.querySelectorAll('.jp-RenderedSVG img')]
                    .filter(img => img.complete && img.naturalWidth > 0)
                    .map(img => {
                        const svg = decodeURIComponent(img.src.slice(img.src.indexOf(',') + 1));
                        return new DOMParser().parseFromString(svg, 'image/svg+xml').documentElement.textContent;
                    })),
        }))""" % VISIBLE
    )


def save(page: Page, lab, name: str) -> list[nbformat.NotebookNode]:
    """Saves the notebook with Ctrl-S, as a person would, and returns its code cells as
    written to disk (outputs included) once every one of them has its execution count."""
    _, _, root = lab
    page.locator(f"{VISIBLE} .jp-Notebook").press("Escape")
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + UI_TIMEOUT
    while True:
        try:
            nb = nbformat.read(root / f"{name}.ipynb", as_version=4)
            code = [c for c in nb.cells if c.cell_type == "code"]
            if all(c.execution_count for c in code):
                return code
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"{name}: Ctrl-S did not save the outputs in {UI_TIMEOUT} s")
        time.sleep(0.25)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_notebook_runs_in_jupyterlab_and_shows_its_figures(page, lab, name):
    open_notebook(page, lab, name)
    run_all(page, name, NOTEBOOK_TIMEOUT)
    screenshot(page, name)
    outputs = cell_outputs(page)
    code = save(page, lab, name)
    assert len(outputs) == len(code), f"{name}: the page shows {len(outputs)} code cells"
    for i, cell in enumerate(code):
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if "raises-exception" in cell.metadata.get("tags", []):
            # One error, named after its cause, as the only output after the cell's own.
            assert len(errors) == 1 and cell.outputs[-1] is errors[0], f"{name} cell {i}: {cell.outputs}"
            assert errors[0].ename in ("ResourceLimit", "LinkError", "Panic", "CompileError"), errors
            assert outputs[i]["errors"], f"{name} cell {i}: the page shows no error"
        else:
            assert not errors, f"{name} cell {i} failed:\n{cell.source}\n{errors}"
    expected = EXPECTED[name]
    tables = sum(o["tables"] for o in outputs)
    assert tables >= expected["tables"], f"{name}: {tables} HTML tables"
    svg_text = "\n".join(t for o in outputs for t in o["svgs"])
    for label in expected["svg_labels"]:
        assert label in svg_text, f"{name}: no SVG labelled {label!r}"


def scratch_notebook(root: Path, name: str, cells: list[str]) -> None:
    """Writes a neuronlab notebook of `cells` into the served folder."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "neuronlab", "display_name": "neuronlab", "language": "rust"}
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, root / f"{name}.ipynb")


def run_cell(page: Page, index: int, timeout: float = test_kernel.CELL_TIMEOUT) -> None:
    """Runs code cell `index` (Ctrl-Enter in it) and waits for its execution count."""
    cell = page.locator(f"{VISIBLE} .jp-CodeCell").nth(index)
    cell.locator(".cm-content").click()
    page.keyboard.press("Control+Enter")
    cell.locator(".jp-InputPrompt", has_text=re.compile(r"\[\d+\]")).wait_for(timeout=timeout * 1000)


def popup_after(page: Page, cell, key: str, popup: str) -> str:
    """The text of the `popup` that `key`, pressed at the end of `cell`'s code, opens
    (closed again with Escape)."""
    cell.locator(".cm-content").click()
    page.keyboard.press("End")
    page.keyboard.press(key)
    shown = page.locator(popup)
    shown.wait_for(state="visible")
    text = shown.inner_text()
    page.keyboard.press("Escape")
    return text


def test_completion_inspection_and_interrupt_in_the_browser(page, lab):
    _, _, root = lab
    scratch_notebook(
        root,
        "interactive",
        [
            "let kept = neuronlab::ones(&[2, 3])?;",
            "%he",
            "neuronlab::ones",
            'println!("spinning"); loop {}',
            "kept.sum()?",
        ],
    )
    open_notebook(page, lab, "interactive")
    cells = page.locator(f"{VISIBLE} .jp-CodeCell")
    run_cell(page, 0, test_kernel.BUILD_TIMEOUT)

    # Tab after `%he` lists the magics it can become.
    assert "%help" in popup_after(page, cells.nth(1), "Tab", ".jp-Completer")
    # Shift-Tab on a function shows its documentation.
    assert "ones" in popup_after(page, cells.nth(2), "Shift+Tab", ".jp-Tooltip")

    # A runaway cell: the interrupt stops it, and the session keeps its tensors.
    cells.nth(3).locator(".cm-content").click()
    page.keyboard.press("Control+Enter")
    cells.nth(3).locator(".jp-OutputArea-output", has_text="spinning").wait_for(
        timeout=test_kernel.CELL_TIMEOUT * 1000
    )
    page.locator(f"{VISIBLE} jp-button[data-command='notebook:interrupt-kernel']").click()
    cells.nth(3).locator(".jp-OutputArea-output", has_text="Interrupted").wait_for()
    run_cell(page, 4)
    result = cells.nth(4).locator(".jp-OutputArea").inner_text()
    assert "tensor f32[]" in result and "6." in result, result
    screenshot(page, "interactive")
