"""Render the asv performance history: asv's HTML site and one PNG plot per benchmark.

    python benchmarks/render_history.py            # asv publish + PNGs into docs/img/
    python benchmarks/render_history.py --no-html  # PNGs only (no asv needed, matplotlib only)

Reads asv's results files (``asv_bench/results/<machine>/<commit>-<env>.json``, committed per
machine), runs ``asv publish`` (HTML into ``asv_bench/html/``, git-ignored) unless ``--no-html``,
and writes ``docs/img/asv-<machine>-<benchmark>.png``: each parameter combination's result (the
median time, or the memory, asv stored) per commit run (in date order), one line per combination, failed or skipped
combinations left out.  ``--bench REGEX`` keeps the benchmarks whose name matches;
``--max-lines`` caps the lines a plot shows (the slowest combinations are kept).
"""

from __future__ import annotations

import argparse
import datetime as dt
import glob
import itertools
import json
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ASV = os.path.join(ROOT, "asv_bench")


def load_results(results_dir):
    """{machine: [(date, commit, {benchmark: [(param tuple, seconds or None)]})]}, oldest first."""
    history = {}
    for machine_dir in sorted(glob.glob(os.path.join(results_dir, "*", ""))):
        machine = os.path.basename(os.path.dirname(machine_dir))
        runs = []
        for path in sorted(glob.glob(os.path.join(machine_dir, "*.json"))):
            if os.path.basename(path) == "machine.json":
                continue
            with open(path) as fh:
                data = json.load(fh)
            if "results" not in data or "commit_hash" not in data:
                continue
            columns = data.get("result_columns", ["result", "params"])
            benches = {}
            for name, entry in data["results"].items():
                if isinstance(entry, dict):  # older asv: {"result": ..., "params": ...}
                    result, params = entry.get("result"), entry.get("params", [])
                else:
                    row = dict(zip(columns, entry))
                    result, params = row.get("result"), row.get("params", [])
                if result is None:
                    continue
                combos = list(itertools.product(*params)) if params else [()]
                if not isinstance(result, list):
                    result = [result]
                benches[name] = [(combo, value) for combo, value in zip(combos, result)]
            date = dt.datetime.fromtimestamp(data.get("date", 0) / 1000, dt.timezone.utc)
            runs.append((date, data["commit_hash"], benches))
        if runs:
            history[machine] = sorted(runs, key=lambda r: r[0])
    return history


def _label(combo) -> str:
    return ", ".join(str(p).strip("'") for p in combo) or "time"


def render(history, out_dir, bench_regex=None, max_lines=24) -> list:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    written = []
    for machine, runs in history.items():
        names = sorted({name for _, _, benches in runs for name in benches})
        for name in names:
            if bench_regex and not re.search(bench_regex, name):
                continue
            series = {}  # combo -> [(run index, value)]
            for index, (_, _, benches) in enumerate(runs):
                for combo, value in benches.get(name, []):
                    if isinstance(value, (int, float)) and value == value:  # skip None / NaN
                        series.setdefault(combo, []).append((index, float(value)))
            if not series:
                continue
            if len(series) > max_lines:  # keep the slowest combinations (latest time)
                keep = sorted(series, key=lambda c: series[c][-1][1], reverse=True)[:max_lines]
                series = {c: series[c] for c in keep}
            fig, ax = plt.subplots(figsize=(8, 4.5))
            ax.set_prop_cycle(color=plt.cm.tab20.colors)
            kind = name.rsplit(".", 1)[-1].split("_", 1)[0]
            scale, unit = {"time": (1e3, "ms (median)"), "peakmem": (2.0 ** -20, "MiB (peak)"),
                           "mem": (2.0 ** -20, "MiB")}.get(kind, (1.0, "value"))
            for combo, points in sorted(series.items(), key=lambda kv: -kv[1][-1][1]):
                xs, values = zip(*points)
                ax.plot(xs, [v * scale for v in values], marker="o", label=_label(combo))
            # one tick per run (commits in date order): short hash and date
            ax.set_xticks(range(len(runs)))
            ax.set_xticklabels([f"{commit[:8]}\n{date:%Y-%m-%d}" for date, commit, _ in runs],
                               fontsize=7)
            ax.set_xlim(-0.5, len(runs) - 0.5)
            ax.set_yscale("log")
            ax.set_ylabel(unit)
            ax.set_title(f"{name}  [{machine}]", fontsize=10)
            ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.0, 0.5))
            ax.grid(True, which="both", alpha=0.3)
            fig.tight_layout()
            safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"asv-{machine}-{name}")
            path = os.path.join(out_dir, safe + ".png")
            fig.savefig(path, dpi=110)
            plt.close(fig)
            written.append(path)
    return written


def publish() -> bool:
    """``asv publish`` into asv_bench/html (False when asv is not installed)."""
    exe = shutil.which("asv")
    cmd = [exe] if exe else [sys.executable, "-m", "asv"]
    try:
        subprocess.run(cmd + ["publish", "--config", os.path.join(ASV, "asv.conf.json")],
                       cwd=ASV, check=True)
    except (FileNotFoundError, subprocess.CalledProcessError) as exc:
        print(f"asv publish failed or asv is not installed ({exc}); PNGs only", file=sys.stderr)
        return False
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", default=os.path.join(ASV, "results"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "img"))
    ap.add_argument("--bench", default=None, help="regex on benchmark names")
    ap.add_argument("--max-lines", type=int, default=24)
    ap.add_argument("--no-html", action="store_true", help="skip asv publish")
    args = ap.parse_args(argv)
    if not args.no_html and publish():
        print(f"HTML: {os.path.join(ASV, 'html', 'index.html')}")
    history = load_results(args.results)
    if not history:
        print(f"no asv results under {args.results}", file=sys.stderr)
        return 1
    for path in render(history, args.out, args.bench, args.max_lines):
        print(os.path.relpath(path, ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
