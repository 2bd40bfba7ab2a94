"""How close is the simulator to a live run? Train the embedded default live under six configurations, calibrate the
simulator on ONE of them, simulate all six with that workload, and compare.

The configurations vary what the dispatch policy decides: ``max_staleness`` 0, 1 (the default) and 2,
``permit_release: group``, a quarter of the permits (``max_concurrent_rollouts: 64``) and
``group_admission: informative``. The workload (``platoon calibrate``) is fitted on the default's run alone; every
other configuration is a prediction. Measured against predicted: median step time, run time, permit busy share,
trainer idle share, mean staleness of trained groups and stale share, each with its error (relative for times, the
difference for shares and staleness).

Writes ``runs/experiments/fidelity/`` (``--out``): ``live-<name>/`` and ``sim-<name>/`` run directories,
``workload.yaml``, ``results.csv``, ``results.md`` and ``fidelity.png``. ``--steps`` makes it shorter (the live runs
take most of the time: about 0.4 s a step each on two CPU cores).
"""

import argparse
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from platoon.analysis import load_run  # noqa: E402
from platoon.live.launch.command import train  # noqa: E402
from platoon.report import SHARES, summarize, twin_error  # noqa: E402
from platoon.runs.atomic import write_atomic  # noqa: E402
from platoon.sim.calibrate import calibrate, workload_text  # noqa: E402
from platoon.sim.command import Request, simulate  # noqa: E402

# --- config ------------------------------------------------------------------------------------------------------
args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
args.add_argument("--steps", type=int, default=100)
args.add_argument("--out", type=Path, default=Path("runs/experiments/fidelity"))
args.add_argument("--group-every", type=int, default=1, help="trace.group_every of the live runs")
opts = args.parse_args()
CALIBRATE_ON = "default"
CONFIGS = {
    "default": [],
    "staleness-0": ["train.max_staleness=0"],
    "staleness-2": ["train.max_staleness=2"],
    "group-release": ["train.permit_release=group"],
    "permits-64": ["train.max_concurrent_rollouts=64"],
    "informative": ["train.group_admission=informative"],
}
QUANTITIES = ["step_seconds_median", "hours", "permit_busy_share", "trainer_idle_share", "staleness_mean",
              "stale_share"]
# Every run evaluates at the start and the end only (eval.every 0): evaluation time is a trainer pause the
# workload fits (sim.trainer.eval_s); pass@1 is not compared (the workload holds the pass share fixed).
COMMON = [f"train.max_training_steps={opts.steps}", "eval.every=0", "eval.at_start=true",
          f"trace.group_every={opts.group_every}", "checkpoint.recovery_every=null", "checkpoint.keep_recovery=null"]

# --- live runs ---------------------------------------------------------------------------------------------------
opts.out.mkdir(parents=True, exist_ok=True)
for name, overrides in CONFIGS.items():
    path = opts.out / f"live-{name}"
    if not (path / "lock.json").exists() or not load_run(path, events=False).metrics.shape[0]:
        print(f"training {name} ...", flush=True)
        train(None, [*COMMON, *overrides], out=path, progress=False)

# --- calibrate on one, simulate all --------------------------------------------------------------------------------
cal = calibrate(opts.out / f"live-{CALIBRATE_ON}")
workload = opts.out / "workload.yaml"
write_atomic(workload, workload_text(cal, opts.out / f"live-{CALIBRATE_ON}"))
for fit in cal.fits:
    print(f"calibrated {fit.key}: {fit.value} ({fit.samples} samples; {fit.quality})")
rows = []
for name in CONFIGS:
    live = opts.out / f"live-{name}"
    twin = opts.out / f"sim-{name}"
    if not (twin / "lock.json").exists():
        simulate(Request(like=live, workload=workload, out=twin))  # the run's own config, the one workload
    measured, predicted = summarize(load_run(live, events=False)), summarize(load_run(twin, events=False))
    for q in QUANTITIES:
        rows.append({"config": name, "quantity": q, "measured": measured[q], "predicted": predicted[q],
                     "error": twin_error(q, measured[q], predicted[q]), "calibrated_on": name == CALIBRATE_ON})

# --- results -------------------------------------------------------------------------------------------------------
table = pd.DataFrame(rows)
table.to_csv(opts.out / "results.csv", index=False)


def cell(q: str, measured: float, predicted: float, error: float) -> str:
    if math.isnan(error):
        return f"{measured:.3g} / {predicted:.3g}"
    shown = f"{error:+.3f}" if q in SHARES or q == "staleness_mean" else f"{error:+.1%}"
    return f"{measured:.3g} / {predicted:.3g} ({shown})"


lines = ["| config | " + " | ".join(QUANTITIES) + " |", "|---|" + "---:|" * len(QUANTITIES)]
for name in CONFIGS:
    part = table[table.config == name].set_index("quantity")
    cells = [cell(q, *part.loc[q, ["measured", "predicted", "error"]]) for q in QUANTITIES]
    lines.append(f"| {name}{' (calibrated on)' if name == CALIBRATE_ON else ''} | " + " | ".join(cells) + " |")
text = (f"Measured (live) / predicted (simulated, calibrated on {CALIBRATE_ON}) after {opts.steps} steps of the "
        "embedded default; errors relative for times, differences for shares and staleness.\n\n"
        + "\n".join(lines) + "\n")
(opts.out / "results.md").write_text(text)
print(text)

# --- plot ----------------------------------------------------------------------------------------------------------
fig, axes = plt.subplots(2, 3, figsize=(13, 7))
for ax, q in zip(axes.flat, QUANTITIES, strict=True):
    part = table[table.quantity == q]
    ax.scatter(part.measured, part.predicted, c=["tab:red" if c else "tab:blue" for c in part.calibrated_on])
    for _, row in part.iterrows():
        ax.annotate(row.config, (row.measured, row.predicted), fontsize=7)
    lo = min(part.measured.min(), part.predicted.min())
    hi = max(part.measured.max(), part.predicted.max())
    ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8)
    ax.set(title=q, xlabel="measured (live)", ylabel="predicted (simulated)")
fig.suptitle(f"Simulator fidelity: calibrated on {CALIBRATE_ON} (red), predicted for the others")
fig.tight_layout()
fig.savefig(opts.out / "fidelity.png", dpi=100)
print(f"wrote {opts.out / 'results.md'} and {opts.out / 'fidelity.png'}")
