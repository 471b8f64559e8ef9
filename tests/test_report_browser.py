"""The HTML report as a person sees it: opened in headless Chromium (Debian's ``chromium``, driven by
Playwright), it logs no console error or warning, asks the network for nothing, and draws every chart.

Chromium is installed here when missing (``apt-get install -y chromium``); where that cannot be done the
test skips, except under ``CI=true``, where a failed install fails the run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ctxtool.cli import run

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CHROMIUM = "/usr/bin/chromium"


def _install_chromium() -> str | None:
    """Why Chromium could not be installed, or None when it is there."""
    if Path(CHROMIUM).exists():
        return None
    apt = shutil.which("apt-get")
    if apt is None:
        return "apt-get is not available to install chromium"
    sudo: list[str] = [] if os.geteuid() == 0 else (["sudo", "-n"] if shutil.which("sudo") else [])
    if os.geteuid() != 0 and not sudo:
        return "not root and no sudo to run apt-get install chromium"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for step in ("update", "install"):
        args = [*sudo, apt, step, "-y", "-qq", *(["chromium"] if step == "install" else [])]
        done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=900, check=False)
        if done.returncode != 0 and step == "install":  # a failed update may still leave a usable index
            return f"apt-get install chromium failed: {done.stderr.strip()[-500:]}"
    return None if Path(CHROMIUM).exists() else "chromium is still missing after apt-get install"


@pytest.fixture(scope="session")
def chromium() -> str:
    why = _install_chromium()
    if why is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"Chromium is needed under CI: {why}")
        pytest.skip(why)
    return CHROMIUM


def test_report_renders_in_chromium(tmp_path: Path, chromium: str) -> None:
    from playwright.sync_api import sync_playwright

    page_file = tmp_path / "report.html"
    assert run(["report", str(FIXTURES), "--output", str(page_file), "--no-cache"]) == 0

    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            # Warnings too: Vega-Lite logs one for a spec it had to change (e.g. 'Dropping "fit-y"').
            page.on("console", lambda m: errors.append(m.text) if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(page_file.as_uri())
            page.wait_for_function(
                "() => [...document.querySelectorAll('div.chart')].every(d => d.querySelector('svg'))",
                timeout=30_000,
            )
            charts = page.eval_on_selector_all(
                "div.chart",
                "ds => ds.map(d => { const s = d.querySelector('svg'); "
                "const r = s.getBoundingClientRect(); return {id: d.id, w: r.width, h: r.height, "
                "marks: s.querySelectorAll('path, rect').length}; })",
            )
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
            widths = {}
            for width in (1280, 390):  # a laptop and a phone: the page never scrolls sideways
                page.set_viewport_size({"width": width, "height": 900})
                page.wait_for_timeout(300)  # vega-embed redraws "container"-wide charts on resize
                widths[width] = page.evaluate(
                    "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
                )
        finally:
            browser.close()

    assert errors == []
    assert [u for u in requests if not u.startswith("file://")] == []
    assert len(charts) >= 4  # three spend charts, at least one session
    for chart in charts:
        assert chart["w"] > 100, chart
        assert chart["h"] > 50, chart
        assert chart["marks"] > 0, chart
    assert (tmp_path / "report.png").stat().st_size > 10_000
    for width, (scroll, client) in widths.items():
        assert scroll <= client, (width, scroll, client)


def test_report_escapes_session_text(tmp_path: Path) -> None:
    """A prompt holding markup stays text: escaped in tables, and no ``</script>`` leaves the chart data."""
    chats = tmp_path / "gemini" / "tmp" / "proj" / "chats"
    chats.mkdir(parents=True)
    evil = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    (chats / "session-2026-05-01T10-00-evil0001.jsonl").write_text(
        '{"sessionId":"evil0001-0000","projectHash":"h","startTime":"2026-05-01T10:00:00.000Z"}\n'
        + '{"id":"u1","timestamp":"2026-05-01T10:00:01.000Z","type":"user","content":'
        + f'"{evil}"}}\n'
        + '{"id":"g1","timestamp":"2026-05-01T10:00:02.000Z","type":"gemini","content":"ok",'
        + '"model":"gemini-2.5-pro","tokens":{"input":5000,"output":10,"cached":0,"thoughts":0,"tool":0,'
        + '"total":5010}}\n',
        encoding="utf-8",
    )
    page_file = tmp_path / "r.html"
    assert run(["report", str(chats), "--output", str(page_file), "--no-cache"]) == 0
    text = page_file.read_text(encoding="utf-8")
    assert evil not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "onerror=alert(2)>" not in text


def test_report_inlines_its_runtime_and_at_most_ten_series(tmp_path: Path) -> None:
    """The page holds Vega, Vega-Lite 5 and vega-embed itself, and a chart coloured by project shows the
    largest nine and "other" when there are more."""
    from ctxtool import frames
    from ctxtool.report.charts import SERIES, spend_charts
    from ctxtool.report.page import chart_runtime

    runtime = chart_runtime()
    assert "vegaEmbed" in runtime
    assert 'version="5.' in runtime  # Vega 5, which Vega-Lite 5 drives
    assert "</script" not in runtime

    chats = tmp_path / "gemini" / "tmp"
    for i in range(SERIES + 3):
        folder = chats / f"proj{i:02d}" / "chats"
        folder.mkdir(parents=True)
        (folder / f"session-2026-05-01T10-00-p{i:02d}.jsonl").write_text(
            f'{{"sessionId":"p{i:02d}","projectHash":"h{i}","startTime":"2026-05-01T10:00:00.000Z"}}\n'
            + '{"id":"g1","timestamp":"2026-05-01T10:00:02.000Z","type":"gemini","content":"ok",'
            + f'"model":"gemini-2.5-pro","tokens":{{"input":{1000 * (i + 1)},"output":1,'
            + f'"total":{1000 * (i + 1) + 1}}}}}\n',
            encoding="utf-8",
        )
    corpus = frames.load([chats])
    spec = dict(spend_charts(corpus))["tokens-day-project"]
    projects = {r["project"] for r in spec["data"]["values"]}
    assert len(projects) == SERIES
    assert "other" in projects
    assert sum(r["total"] for r in spec["data"]["values"]) == corpus.requests.get_column("total").sum()


def test_report_needs_html_output(tmp_path: Path) -> None:
    assert run(["report", str(FIXTURES), "--output", str(tmp_path / "r.txt")]) == 2


def test_chart_data_is_in_a_fixed_order() -> None:
    """polars' group_by yields its groups in no fixed order: every chart's rows are sorted on all their keys,
    so the same sessions give the same page bytes on every run."""
    from ctxtool import frames
    from ctxtool.report.charts import spend_charts

    corpus = frames.load([FIXTURES / "gemini"])
    for name, spec in spend_charts(corpus):
        rows = next(iter(spec["datasets"].values())) if "datasets" in spec else spec["data"]["values"]
        keys = [k for k in ("day", "model", "project") if rows and k in rows[0]]
        if keys[:1] == ["day"]:
            got = [tuple((r[k] is None, str(r[k])) for k in keys) for r in rows]  # nulls last, as polars
            assert got == sorted(got), name


def test_report_status_line_where_progress_is_wanted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a terminal the command names what it is doing on stderr (a rich status), and stops it before its
    last line."""
    from ctxtool.cli import options
    from ctxtool.cli import report as report_cli

    steps: list[str] = []
    real = report_cli._Status.step
    monkeypatch.setattr(report_cli._Status, "step", lambda self, text: (steps.append(text), real(self, text)))
    monkeypatch.setattr(options, "progress_wanted", lambda: True)
    assert run(["report", str(FIXTURES), "--output", str(tmp_path / "r.html"), "--no-cache"]) == 0
    assert steps == ["drawing the page"]
    assert capsys.readouterr().err.rstrip().endswith(f"report written to {tmp_path / 'r.html'}")
