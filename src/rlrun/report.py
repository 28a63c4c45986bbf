"""`rlrun show RUN_DIR` and `rlrun compare RUN ...`: what runs did, in the terminal and as one HTML file.

show: a summary table of every logged series (first, last, min, max, mean of the last 5 steps) and
RUN_DIR/report.html: interactive plots of every series in metrics.jsonl, the plan, the resolved config and
the recorded samples (rlrun.records) when the run kept any; the PNG (metrics.plot) is redrawn beside it.
A sweep dir (summary.json and one run dir per point) is shown as a comparison of its points.
compare: the curves of several runs (or every point of sweeps) overlaid, each labelled by how its config
differs from the others' (the overrides it was run with, else rlrun.config.diff.flatten over the
saved config.yaml files).

The HTML inlines plotly.js (https://plotly.com/python/interactive-html-export/), so it opens offline.
Imports neither torch nor ray.
"""
from __future__ import annotations

import html
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from rlrun.config.cost import measured_phases, predicted_phases
from rlrun.config.diff import flatten
from rlrun.config.errors import ConfigError, Problem, UsageError
from rlrun.config.rundir import read_run_dir
from rlrun.metrics import METRICS_FILE, read_metrics

REPORT_FILE = "report.html"
COMPARE_FILE = "compare.html"
ERROR_FILE = "error.txt"   # written by `rlrun run` into the run dir when the run fails (rlrun.cli)
MAX_SAMPLE_ROWS = 64  # recorded samples shown in the report (the Parquet files hold them all)
LAST = 5  # steps in the "last" mean of the summary table
COLS = 3  # plots per row


# series shown first (by prefix), the rest after them in the order they were logged
SERIES_ORDER = ("rollout/reward_mean", "rollout/response_len_mean", "eval/", "train/loss", "train/grad_norm",
                "train/entropy", "train/kl", "train/pg_clipfrac", "rollout/", "train/", "critic/", "time/", "perf/")


def order_series(keys) -> list[str]:
    def rank(k: str) -> int:
        return next((i for i, p in enumerate(SERIES_ORDER) if k.startswith(p)), len(SERIES_ORDER))
    return sorted(keys, key=rank)  # stable: logged order within a rank


@dataclass
class RunData:
    path: Path
    rows: list[dict]
    config: dict = field(default_factory=dict)
    plan: dict = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)
    label: str = ""

    @property
    def series(self) -> list[str]:
        keys: dict[str, None] = {}
        for r in self.rows:
            keys.update(dict.fromkeys(k for k in r if k != "step"))
        return order_series(keys)

    def values(self, key: str) -> tuple[list[int], list[float]]:
        pts = [(r["step"], r[key]) for r in self.rows if key in r]
        return [p[0] for p in pts], [p[1] for p in pts]


def load_run(path: str | Path) -> RunData:
    path = Path(path)
    metrics = path / METRICS_FILE
    if not (path / "config.yaml").exists():
        raise ConfigError([Problem(str(path), "is not a run dir (no config.yaml)", "pass a run dir "
                                   "(outputs/NAME/TIMESTAMP) or a sweep dir (outputs/multirun/TIMESTAMP)", str(path))])
    plan = path / "plan.json"
    config, overrides = read_run_dir(path)
    return RunData(path, read_metrics(metrics) if metrics.exists() else [], config or {},
                   json.loads(plan.read_text()) if plan.exists() else {}, overrides, path.name)


def expand(paths: list[str | Path]) -> list[Path]:
    """Run dirs, and sweep dirs replaced by their points' run dirs (in point order)."""
    out = []
    for p in map(Path, paths):
        summary = p / "summary.json"
        if not (p / "config.yaml").exists() and summary.exists():
            out += [Path(pt["run_dir"]) if Path(pt["run_dir"]).is_absolute() else p / Path(pt["run_dir"]).name
                    for pt in json.loads(summary.read_text())["points"]]
        else:
            out.append(p)
    return out


def _differing(dicts: list[dict]) -> list[str]:
    keys = sorted({k for d in dicts for k in d})
    return [k for k in keys if k != "run.output_dir" and len({json.dumps(d.get(k), default=str) for d in dicts}) > 1]


def label_runs(runs: list[RunData]) -> None:
    """Each run's label: the overrides in which it differs from the others (what the user set, e.g. a
    sweep's axes); where those do not tell the runs apart, the resolved config values that differ
    (rlrun.config.diff.flatten); the dir name when nothing does."""

    flat = [flatten(r.config) for r in runs]

    def label(dicts):
        keys = _differing(dicts)
        # a key one run did not override shows its resolved value (a group choice: "default")
        return [" ".join(f"{k}={d[k] if k in d else f.get(k, 'default')}" for k in keys) for d, f in zip(dicts, flat)]

    given = [dict(o.lstrip("+~").split("=", 1) if "=" in o else (o, None) for o in r.overrides) for r in runs]
    labels = label(given)
    if len(set(labels)) < len(runs):
        labels = label(flat)
    for r, text in zip(runs, labels):
        r.label = text or r.path.name
    seen: dict[str, int] = {}
    for r in runs:
        seen[r.label] = seen.get(r.label, 0) + 1
    for r in runs:
        if seen[r.label] > 1:
            r.label = f"{r.label} ({r.path.name})"


def _num(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.4g}"


def series_stats(run: RunData) -> list[tuple[str, ...]]:
    """(series, first, last, min, max, mean of the last LAST steps) per logged series."""
    out = []
    for key in run.series:
        _, v = run.values(key)
        tail = v[-LAST:]
        out.append((key, _num(v[0]), _num(v[-1]), _num(min(v)), _num(max(v)), _num(sum(tail) / len(tail))))
    return out


def run_stats(run: RunData) -> tuple[str, ...]:
    """(label, steps, reward of the first and last windows, last response length, mean step seconds)."""
    from rlrun.parts.run_metrics import summary_window

    def mean(key, part):
        v = run.values(key)[1]
        w = summary_window(len(v))  # the windows never overlap (the run's own summary uses the same)
        v = v[:w] if part == "first" else v[-w:] if part == "last" else v
        return sum(v) / len(v) if v else None
    return (run.label, str(len(run.rows)), _num(mean("rollout/reward_mean", "first")),
            _num(mean("rollout/reward_mean", "last")), _num(mean("rollout/response_len_mean", "last")),
            _num(mean("time/step_s", "all")))


COST_COLUMNS = ("phase", "predicted s (plan)", "measured s (mean)", "measured / predicted")


def cost_rows(run: RunData) -> list[tuple[str, ...]]:
    """The plan's predicted seconds per phase (plan.json's cost, rlrun.config.cost) next to the run's measured
    means (the first step, a warm-up, left out; eval and save per step that has them)."""

    cost = run.plan.get("cost") or {}
    if "phases_s" not in cost or not run.rows:
        return []
    pred, meas = predicted_phases(cost), measured_phases(run.rows)
    out = []
    for ph in (*pred, *[k for k in meas if k not in pred and k != "response_len"]):
        p, m = pred.get(ph), meas.get(ph)
        if not p and not m:
            continue
        out.append((ph, _num(p), _num(m), _num(m / p) if p and m else "-"))
    return out


RUN_COLUMNS = ("run", "steps", f"reward first {LAST}*", f"reward last {LAST}*", "len (last)", "step s (mean)")
RUN_NOTE = f"* {LAST} steps, at most half the run's (the first and last windows never overlap)"
SERIES_COLUMNS = ("series", "first", "last", "min", "max", f"mean last {LAST}")


def print_table(title: str, columns, rows) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title)
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i == 0 else "right", no_wrap=i == 0)
    for r in rows:
        t.add_row(*r)
    console = Console()
    if not console.is_terminal:  # a file or pipe: rich would wrap at 80 columns and cut the numbers
        console = Console(width=120)
    console.print(t)


def figure(runs: list[RunData]):
    """Every series of every run: one subplot per series, one colour (and legend entry) per run."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative
    from plotly.subplots import make_subplots

    keys: dict[str, None] = {}
    for r in runs:
        keys.update(dict.fromkeys(r.series))
    keys_l = order_series(keys) or ["(no metrics logged yet)"]
    nrows = math.ceil(len(keys_l) / COLS)
    fig = make_subplots(rows=nrows, cols=COLS, subplot_titles=keys_l, vertical_spacing=min(0.3 / nrows, 0.08),
                        horizontal_spacing=0.06)
    palette = qualitative.Plotly
    for i, run in enumerate(runs):
        for j, key in enumerate(keys_l):
            x, y = run.values(key) if key in keys else ([], [])
            if x:
                fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers" if len(x) < 30 else "lines", name=run.label,
                                         legendgroup=str(i), showlegend=j == 0 or key == keys_l[0],
                                         line={"color": palette[i % len(palette)]}, marker={"size": 4}),
                              row=j // COLS + 1, col=j % COLS + 1)
    for j, key in enumerate(keys_l):  # a constant series: plotly's autorange is c-1..c+1 (lr 1e-6 looked like 0)
        ys = [v for run in runs if key in keys for v in run.values(key)[1]
              if isinstance(v, (int, float)) and math.isfinite(v)]
        if ys and min(ys) == max(ys):
            c = ys[0]
            half = abs(c) * 0.5 or 1.0
            fig.update_yaxes(range=[c - half, c + half], exponentformat="e", row=j // COLS + 1, col=j % COLS + 1)
    fig.update_layout(height=max(320, 260 * nrows), template="plotly_white", hovermode="x unified",
                      legend={"orientation": "h", "yref": "container", "y": 1.0, "yanchor": "top"},
                      margin={"t": 110})
    fig.update_xaxes(title_text="rollout step", title_font={"size": 10})
    return fig


def _table_html(columns, rows) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _samples_html(run: RunData) -> str:
    from rlrun.records import record_files

    files = record_files(run.path)
    if not files:
        return ("<p>No rollout records (logging.rollout_records=none, or a run from before records "
                "existed).</p>")
    import pyarrow.parquet as pq

    rows = []
    for f in files[-4:]:  # the latest rollouts: what the model writes now
        rows += pq.read_table(f, columns=["rollout_id", "group_id", "kept_index", "reward", "status", "prompt",
                                          "response", "turns"]).to_pylist()
    rows = rows[-MAX_SAMPLE_ROWS:]
    cols = ("rollout", "group", "trained", "reward", "status", "prompt", "response", "turns")
    return (f"<p>{len(files)} record files in <code>{html.escape(str(run.path / 'rollouts'))}</code>; the last "
            f"{len(rows)} samples:</p>" +
            _table_html(cols, [(r["rollout_id"], r["group_id"], "yes" if r["kept_index"] >= 0 else "no",
                                _num(r["reward"]), r["status"], r["prompt"], r["response"], r["turns"] or "")
                               for r in rows]))


_CSS = """body{font-family:system-ui,sans-serif;margin:24px;color:#222}table{border-collapse:collapse;
font-size:13px;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right;vertical-align:top}
td:first-child,th:first-child{text-align:left}pre{background:#f6f8fa;padding:12px;overflow:auto;max-height:480px;
font-size:12px}details{margin:12px 0}summary{cursor:pointer;font-weight:600}h1{font-size:22px}"""


def render_html(title: str, runs: list[RunData], path: Path) -> Path:
    """One self-contained HTML file (plotly.js inlined): tables, plots, and for one run its plan,
    config and samples."""
    import yaml

    parts = [f"<h1>{html.escape(title)}</h1>", _table_html(RUN_COLUMNS, [run_stats(r) for r in runs]),
             figure(runs).to_html(full_html=False, include_plotlyjs=True, div_id="rlrun-plots")]
    if len(runs) == 1:
        run = runs[0]
        cost = cost_rows(run)
        if cost:
            c = run.plan["cost"]
            parts.append(f"<h2>Time per rollout step: predicted vs measured</h2><p>Prediction from the plan "
                         f"({html.escape(c.get('basis', ''))}: {html.escape(c.get('note', ''))}); step_core = a step "
                         f"without eval and save.</p>{_table_html(COST_COLUMNS, cost)}")
        parts += [f"<h2>Series</h2>{_table_html(SERIES_COLUMNS, series_stats(run))}",
                  f"<h2>Samples</h2>{_samples_html(run)}",
                  f"<details><summary>Plan</summary><pre>{html.escape(json.dumps(run.plan, indent=2))}</pre></details>",
                  "<details><summary>Config</summary><pre>"
                  f"{html.escape(yaml.safe_dump(run.config, sort_keys=False))}</pre></details>"]
    else:
        for run in runs:
            parts.append(f"<p><b>{html.escape(run.label)}</b>: <code>{html.escape(str(run.path))}</code></p>")
    doc = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
           f"<style>{_CSS}</style></head><body>{''.join(parts)}</body></html>")
    path.write_text(doc, encoding="utf-8")
    return path


def show(path: str | Path) -> Path:
    """A run dir: its tables, RUN_DIR/report.html and the PNG. A sweep dir: compare its points."""
    path = Path(path)
    if not (path / "config.yaml").exists() and (path / "summary.json").exists():
        return compare([path], path / REPORT_FILE)
    from rlrun.metrics import plot, run_title

    run = load_run(path)
    run.label = run_title(path)
    print_table(run.label, SERIES_COLUMNS, series_stats(run))
    if cost_rows(run):
        print_table("time per rollout step: predicted (plan) vs measured", COST_COLUMNS, cost_rows(run))
    if run.rows:
        plot(path)
    return render_html(run.label, [run], path / REPORT_FILE)


def compare(paths: list[str | Path], out: str | Path | None = None) -> Path:
    runs = [load_run(p) for p in expand(paths)]
    label_runs(runs)
    print_table("runs", RUN_COLUMNS, [run_stats(r) for r in runs])
    print(RUN_NOTE)
    return render_html(f"{len(runs)} runs", runs, Path(out) if out else default_compare_path([r.path for r in runs]))


def default_compare_path(run_dirs: list[Path]) -> Path:
    """Where `rlrun compare` writes without --out: next to the runs, as `show` writes into the run dir: the
    deepest folder holding all of them (a sweep dir for its points), COMPARE_FILE there."""
    import os

    return Path(os.path.commonpath([str(Path(p).resolve()) for p in run_dirs])) / COMPARE_FILE


def show_main(a) -> int:
    if len(a.positional) != 1:
        raise UsageError("show takes one RUN_DIR (a run dir or a sweep dir)")
    print(f"report: {show(a.positional[0])}")
    return _empty_run_note(Path(a.positional[0]))


def _empty_run_note(path: Path) -> int:
    """A run dir with no step logged: say why (its error.txt, when the run failed) and exit 1."""
    if not (path / "config.yaml").exists() or load_run(path).rows:
        return 0
    error = path / ERROR_FILE
    why = (f"the run failed before its first step: {error.read_text().splitlines()[0]} (full traceback: {error})"
           if error.exists() else "the run is still starting, or stopped before its first step")
    print(f"rlrun show: {path} has no steps logged: {why}", file=sys.stderr)
    return 1


def compare_main(a) -> int:
    if not a.positional:
        raise UsageError("compare takes one or more run dirs or sweep dirs")
    print(f"report: {compare(a.positional, a.out)}")
    return 0
