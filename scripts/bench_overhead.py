"""What a cell costs beyond the agent's own work, and how a suite's time grows with its cells.

1. Overhead: a suite of `--cells` null cells (the agent submits the base model at once), one at a
   time, each split by the harness's own stage clock (`result.json` `harness_seconds`: data, base
   model, features, workspace, baseline, grader, Ray, agent process, agent, judge, close), plus
   the Ray start and the reports timed here. The overhead beyond scoring (all but the agent's run,
   the baseline and the judge) is given as a share of a 15-minute budget.
2. Throughput: suites of `--suites` sizes (default 10 and 50) of null cells side by side
   (`cell_cpus` each) on this machine's embedded Ray: cells per minute and seconds per cell, which
   must stay flat as the suite grows (linear cost).

    .venv/bin/python scripts/bench_overhead.py --task arith-grpo --cells 5 --suites 10,50

The first cell of a fresh installation also builds the task's splits and scores the base; those
are cached (by every file's hash), so the first cell is shown apart. Numbers are this machine's; the table
says which CPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from rlbench.engines.kernel_choice import cpu_identity  # noqa: E402 - after the path setup above

BUDGET_S = 15 * 60
SCORING = ("baseline", "judge")
ORDER = ("data", "base_model", "features", "workspace", "baseline", "grader", "ray", "driver_model",
         "agent_process", "agent", "judge", "close")


def suite(task: str, n: int, cell_cpus: float, results: Path, name: str) -> tuple[float, list]:
    from rlbench.orchestration.suite import load_run_spec, run_suite

    t0 = time.monotonic()
    _, cells = run_suite(load_run_spec(["agent=null", f"task={task}", f"seeds=[{','.join(map(str, range(n)))}]",
                                        f"results={results}", f"suite={name}", f"cell_cpus={cell_cpus}",
                                        "reports=false"]))
    return time.monotonic() - t0, cells


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="arith-grpo")
    ap.add_argument("--cells", type=int, default=5, help="null cells for the stage split (one at a time)")
    ap.add_argument("--suites", default="10,50", help="suite sizes for throughput, comma-separated ('' to skip)")
    ap.add_argument("--cell-cpus", type=float, default=1.0, help="CPUs each throughput cell reserves")
    args = ap.parse_args()
    os.environ.setdefault("RLBENCH_QUIET", "1")
    ncpu = os.cpu_count() or 2
    results = Path(tempfile.mkdtemp(prefix="rlbench-overhead-"))

    from rlbench.ray_session import ensure_ray

    t = time.monotonic()
    ensure_ray(min_cpus=ncpu)
    ray_start = time.monotonic() - t

    wall, cells = suite(args.task, args.cells, float(ncpu), results, "overhead")  # one cell at a time
    bad = [c for c in cells if c.status != "ok"]
    if bad:
        sys.exit(f"cells not ok: {[(c.cell, c.status, c.reason) for c in bad]}")
    from rlbench.orchestration.suite import write_reports

    t = time.monotonic()
    write_reports(Path(cells[0].cell_dir).parents[1], cells)  # the suite's folder: SUITE/cells/KEY
    reports = (time.monotonic() - t) / len(cells)

    print(f"\n## Harness overhead of a null cell ({args.task}; {cpu_identity()}, {ncpu} cores)\n")
    print(f"{len(cells)} null cells one after another ({wall:.0f} s); the first one builds the task's splits "
          "and scores the base where this installation has not yet (its caches), the rest reuse them.\n")
    print("| stage | first cell, s | later cells, median s [min, max] | later, % of a 15-min budget |")
    print("| --- | --- | --- | --- |")
    stages = [c.harness_seconds or {} for c in cells]
    warm = stages[1:] or stages
    names = [s for s in ORDER if any(s in x for x in stages)] + sorted({k for x in stages for k in x} - set(ORDER))
    for name in names:
        w = [x.get(name, 0.0) for x in warm]
        print(f"| {name} | {stages[0].get(name, 0.0):.2f} | {statistics.median(w):.2f} [{min(w):.2f}, {max(w):.2f}] | "
              f"{100 * statistics.median(w) / BUDGET_S:.2f} |")
    other = [c.cell_seconds - sum(x.values()) for c, x in zip(cells[1:] or cells, warm)]
    print(f"| unaccounted (cell_seconds - stages) | {cells[0].cell_seconds - sum(stages[0].values()):.2f} | "
          f"{statistics.median(other):.2f} | {100 * statistics.median(other) / BUDGET_S:.2f} |")
    print(f"| Ray start (once per run) | {ray_start:.2f} | - | {100 * ray_start / BUDGET_S:.2f} |")
    print(f"| reports (per cell) | - | {reports:.2f} | {100 * reports / BUDGET_S:.2f} |")
    beyond = [sum(v for k, v in x.items() if k not in SCORING and k != "agent") + o for x, o in zip(warm, other)]
    med = statistics.median(beyond) + reports
    print(f"\nOverhead beyond scoring and the agent (a later cell, with its report): {med:.1f} s = "
          f"{100 * med / BUDGET_S:.1f}% of a 15-minute budget (target: at most 5%); plus {ray_start:.1f} s of "
          "Ray start once per run.")

    sizes = [int(s) for s in args.suites.split(",") if s.strip()]
    if sizes:
        print(f"\n## Suite throughput (null cells, {args.cell_cpus:g} CPUs each, {ncpu} cores, embedded Ray)\n")
        print("| cells | wall s | cells per minute | wall s per cell | mean cell_seconds |")
        print("| --- | --- | --- | --- | --- |")
        for n in sizes:
            wall, cells = suite(args.task, n, args.cell_cpus, results, f"throughput-{n}")
            ok = sum(c.status == "ok" for c in cells)
            mean = statistics.mean(c.cell_seconds or 0.0 for c in cells)
            print(f"| {n} ({ok} ok) | {wall:.0f} | {60 * n / wall:.1f} | {wall / n:.2f} | {mean:.2f} |", flush=True)
    print(f"\nresults under {results}")


if __name__ == "__main__":
    main()
