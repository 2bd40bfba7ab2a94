"""What does ``pass_rate`` cost in held-out pass@1 on the text demo, why, and does the simulator predict it?

Trains the embedded default (the tiny model on platoon-number-search, through the tool-calling harness) live with
each variant of the task sampler and each seed, two runs at a time (``platoon train``; runs already in ``--out``
are kept), then:

1. **Where held-out pass@1 goes**: each run's final policy played on every held-out task (``platoon eval --by-task``,
   ``--episodes`` a task), broken down by the prompt's features (range N; guesses beyond the ``ceil(log2(N + 1))``
   with which binary search always wins) beside each variant's share of draws and of trained groups there;
2. **what the policy learned** (``platoon.sim.fit_learning``, fitted on each run's settled groups): the logit a
   trained group gives its own task (and how fast that fades), the other targets of its prompt, and every task;
3. **the simulator's advice**: each ``uniform`` run calibrated (``platoon calibrate --similar-by range,guesses``),
   each variant simulated from that calibration, and predicted held-out pass@1 and informative share set beside
   the measured ones.

Writes ``--out`` (default ``runs/experiments/sampler_study``): a run per variant and seed, ``by_task.csv`` (held-out
tasks per run), ``results.md``, ``results.csv`` and ``sampler_study.png``. ``--steps``, ``--seeds`` and
``--episodes`` make it shorter.
"""

import argparse
import math
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from platoon.config.loader import config_from_lock, load_config  # noqa: E402
from platoon.live.launch.command import evaluate  # noqa: E402
from platoon.runs import RunDir, read_jsonl  # noqa: E402
from platoon.sim.calibrate import calibrate  # noqa: E402
from platoon.sim.fit_learning import fit_learning, observations  # noqa: E402
from platoon.sim.run import SimRun  # noqa: E402
from platoon.sim.setup import environment_tasks  # noqa: E402

# --- config ------------------------------------------------------------------------------------------------------
args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
args.add_argument("--steps", type=int, default=300)
args.add_argument("--seeds", type=int, default=5)
args.add_argument("--episodes", type=int, default=32, help="Evaluation episodes per held-out task.")
args.add_argument("--out", type=Path, default=Path("runs/experiments/sampler_study"))
args.add_argument("--variants", default=None, help="A comma-separated subset of the variants (default: all).")
opts = args.parse_args()
VARIANTS = {
    "uniform": ["train.task_sampler=uniform"],
    "pass_rate": ["train.task_sampler=pass_rate"],
    "pass_rate_is2": ["train.task_sampler=pass_rate", "train.task_sampler_options.importance_cap=2.0"],
    "pass_rate_near05": ["train.task_sampler=pass_rate", "train.task_sampler_options.near_best=0.5"],
    "pass_rate_forget16": ["train.task_sampler=pass_rate", "train.task_sampler_options.forget_versions=16"],
    "pass_rate_is4": ["train.task_sampler=pass_rate", "train.task_sampler_options.importance_cap=4.0"],
}
if opts.variants:
    VARIANTS = {v: VARIANTS[v] for v in ["uniform", *opts.variants.split(",")] if v in VARIANTS}
SIMILAR_BY = ["range", "guesses"]
SIM_SEEDS = 2

# --- seeding: a live run's draws, rollouts and evaluation episodes derive from train.seed (the asynchronous
# runtime's timing still varies a run: a seed does not fix it); the simulated twins' from their own train.seed


def run_path(variant: str, seed: int) -> Path:
    return opts.out / f"{variant}-seed={seed}"


def train(job: tuple[str, int]) -> None:
    variant, seed = job
    path = run_path(variant, seed)
    if (path / "checkpoints.jsonl").exists() and RunDir(path).read_lock().get("finished"):
        return
    cmd = [sys.executable, "-m", "platoon", "train", "--out", str(path), f"train.max_training_steps={opts.steps}",
           f"train.seed={seed}", *VARIANTS[variant]]
    if path.exists():
        cmd = [sys.executable, "-m", "platoon", "train", "--resume", str(path)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


# --- live runs: two at a time, interleaved by seed so that each variant meets the same load --------------------
jobs = [(v, s) for s in range(opts.seeds) for v in VARIANTS]
with ThreadPoolExecutor(2) as pool:
    list(pool.map(train, jobs))

# --- features of a number-search task -----------------------------------------------------------------------------


def binary_depth(n: int, target: int) -> int:
    """Guesses binary search (the middle of what is left, rounded down) takes to find ``target`` in 1..n."""
    lo, hi, guesses = 1, n, 0
    while True:
        guesses += 1
        mid = (lo + hi) // 2
        if mid == target:
            return guesses
        lo, hi = (mid + 1, hi) if target > mid else (lo, mid - 1)


def features(columns: dict) -> dict:
    n, g, t = int(columns["range"]), int(columns["guesses"]), int(columns["target"])
    return {"range": n, "spare": g - n.bit_length(), "depth_over_guesses": binary_depth(n, t) - g}


# --- per run: the summary, the held-out tasks, the draws, the learning fit ----------------------------------------
summary, held, drawn, fits = [], [], [], []
for variant, seed in jobs:
    path = run_path(variant, seed)
    rows = read_jsonl(path / "metrics.jsonl")
    steps = [r for r in rows if "train/sampler/informative_share" in r]
    evals = [r for r in rows if "eval/pass@1" in r]
    cfg = config_from_lock(RunDir(path).read_lock(), str(path / "lock.json"))
    ids, data = environment_tasks(cfg.environments[0])
    group_of = {t: "/".join(str(d[c]) for c in SIMILAR_BY) for t, d in zip(ids, data, strict=True)}
    events = read_jsonl(path / "tasks" / "events.jsonl")
    cached = opts.out / "by_task" / f"{variant}-seed={seed}-episodes={opts.episodes}.csv"
    if not cached.exists():  # the final policy on every held-out task, once
        report = evaluate(path, n=opts.episodes * len(environment_tasks(cfg.environments[0], training=False)[0]))
        cached.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(report.by_task).to_csv(cached, index=False)
    tasks = pd.read_csv(cached)
    summary.append({"variant": variant, "seed": seed, "pass_at_1_last": evals[-1]["eval/pass@1"],
                    "pass_at_1_by_task": tasks["passes"].sum() / tasks["episodes"].sum(),
                    "informative_share": float(np.mean([r["train/sampler/informative_share"] for r in steps]))})
    for r in tasks.to_dict("records"):
        held.append({"variant": variant, "seed": seed, "pass@1": r["pass@1"],
                     **features({k.split("/", 1)[1]: v for k, v in r.items() if k.startswith("columns/")})})
    fates = {(e["start"], e["seq"]): e["fate"] for e in events if e["event"] == "fate"}
    columns = dict(zip(ids, data, strict=True))
    for e in events:
        if e["event"] == "settle":
            trained = e["verdict"] == "trained" and fates.get((e["start"], e["seq"])) == "consumed"
            drawn.append({"variant": variant, "seed": seed, "trained": trained, **features(columns[e["task_id"]])})
    f = fit_learning(observations(events, group_of))
    fits.append({"variant": variant, "seed": seed, "own_task": f.gain, "half_life": f.half_life,
                 "same_prompt": f.label_gain, "every_task": f.ability_gain, "pseudo_r2": f.pseudo_r2})

summary, held, drawn, fits = map(pd.DataFrame, (summary, held, drawn, fits))
held.to_csv(opts.out / "by_task.csv", index=False)


def welch(a: pd.Series, b: pd.Series) -> float:
    """Welch's t of mean(a) - mean(b) (nan with fewer than two of either)."""
    if len(a) < 2 or len(b) < 2:
        return math.nan
    return float((a.mean() - b.mean()) / math.sqrt(a.var() / len(a) + b.var() / len(b)))


# --- the simulator's advice: calibrate on each uniform run, simulate every variant from it -----------------------
predicted = []
for seed in range(opts.seeds):
    like = run_path("uniform", seed)
    cal = calibrate(like, SIMILAR_BY)
    if not cal.sim["learning"].get("enabled"):  # the fit was not usable: the twin's pass@1 would not move
        print(f"uniform seed {seed}: learning not fitted ({'; '.join(cal.notes)}); no prediction from it")
        continue
    recorded = RunDir(like).read_lock()["config"]
    for variant, overrides in VARIANTS.items():
        for sim_seed in range(SIM_SEEDS):
            path = opts.out / "sim" / f"{variant}-like={seed}-seed={sim_seed}"
            if not (path / "checkpoints.jsonl").exists():
                cfg = load_config(like / "lock.json", [*overrides, f"train.seed={sim_seed}"], data=recorded,
                                  sections={"sim": cal.sim})
                SimRun.create(cfg, path, log=lambda level, message: None).run()
            rows = read_jsonl(path / "metrics.jsonl")
            share = [r["train/sampler/informative_share"] for r in rows if "train/sampler/informative_share" in r]
            predicted.append({"variant": variant, "like": seed, "seed": sim_seed,
                              "pass_at_1_last": [r for r in rows if "eval/pass@1" in r][-1]["eval/pass@1"],
                              "informative_share": float(np.mean(share))})
predicted = pd.DataFrame(predicted, columns=["variant", "like", "seed", "pass_at_1_last", "informative_share"])

# --- results -------------------------------------------------------------------------------------------------------
likes = sorted(set(predicted.like))
lines = [f"Live: the embedded default, {opts.steps} steps, seeds 0-{opts.seeds - 1}, two runs at a time; held-out "
         f"pass@1 of the last evaluation (1024 episodes) and of every held-out task {opts.episodes} times. Simulated: "
         f"calibrated on uniform seeds {likes} (a seed whose learning fit was not usable gives none), {SIM_SEEDS} "
         "simulator seeds each.", "",
         "| variant | pass@1, last eval | sd | by task | informative share | Welch t vs uniform | sim: pass@1 | "
         "sim: informative |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
base = summary[summary.variant == "uniform"]
for variant in VARIANTS:
    mine, sim = summary[summary.variant == variant], predicted[predicted.variant == variant]
    lines.append(f"| {variant} | {mine.pass_at_1_last.mean():.3f} | {mine.pass_at_1_last.std():.3f} | "
                 f"{mine.pass_at_1_by_task.mean():.3f} | {mine.informative_share.mean():.3f} | "
                 f"{welch(mine.pass_at_1_last, base.pass_at_1_last):+.2f} | {sim.pass_at_1_last.mean():.3f} | "
                 f"{sim.informative_share.mean():.3f} |")
for name, key in (("spare guesses", "spare"), ("range", "range"), ("the guesses binary search needs beyond the budget",
                                                                    "depth_over_guesses")):
    lines += ["", f"By {name}: held-out pass@1 (mean over seeds) and share of draws / of trained groups.", "",
              "| " + key + " | " + " | ".join(f"{v} pass@1 | {v} draws | {v} trained" for v in VARIANTS) + " |",
              "|---:|" + "---:|" * (3 * len(VARIANTS))]
    for value in sorted(held[key].unique()):
        cells = []
        for v in VARIANTS:
            h, d = held[(held.variant == v) & (held[key] == value)], drawn[drawn.variant == v]
            cells += [f"{h['pass@1'].mean():.3f}", f"{(d[key] == value).mean():.3f}",
                      f"{(d[key] == value)[d.trained].mean():.3f}"]
        lines.append(f"| {value} | " + " | ".join(cells) + " |")
lines += ["", "What a trained group moves (logit per group; fitted per run, mean over seeds):", "",
          "| variant | own task | half-life (versions) | the prompt's other targets | every task | pseudo-R² |",
          "|---|---:|---:|---:|---:|---:|"]
for variant in VARIANTS:
    f = fits[fits.variant == variant]
    lives = ", ".join(sorted({"never" if h is None or (isinstance(h, float) and math.isnan(h)) else f"{h:g}"
                              for h in f.half_life}))
    lines.append(f"| {variant} | {f.own_task.mean():+.4f} | {lives} | {f.same_prompt.mean():+.5f} | "
                 f"{f.every_task.mean():+.6f} | {f.pseudo_r2.mean():.3f} |")
text = "\n".join(lines) + "\n"
summary.to_csv(opts.out / "results.csv", index=False)
(opts.out / "results.md").write_text(text)
print(text)

# --- plot ----------------------------------------------------------------------------------------------------------
fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
for i, variant in enumerate(VARIANTS):
    h = held[held.variant == variant].groupby("spare")["pass@1"].mean()
    width = 0.8 / len(VARIANTS)
    left.bar(np.array(h.index) + (i - (len(VARIANTS) - 1) / 2) * width, h.values, width=width, label=variant)
    live, sim = summary[summary.variant == variant], predicted[predicted.variant == variant]
    right.errorbar(sim.pass_at_1_last.mean(), live.pass_at_1_last.mean(), xerr=sim.pass_at_1_last.std(),
                   yerr=live.pass_at_1_last.std(), fmt="o", label=variant)
left.set(xlabel="guesses beyond binary search's", ylabel="held-out pass@1", title="Held-out pass@1 by prompt")
lo = min(summary.pass_at_1_last.min(), predicted.pass_at_1_last.min()) - 0.05
hi = max(summary.pass_at_1_last.max(), predicted.pass_at_1_last.max()) + 0.05
right.plot([lo, hi], [lo, hi], color="grey", lw=0.8, label="prediction = measurement")
right.set(xlabel="simulated (calibrated on uniform)", ylabel="measured live",
          title="Held-out pass@1: simulator's prediction vs live")
left.legend()
right.legend()
fig.tight_layout()
fig.savefig(opts.out / "sampler_study.png", dpi=100)
print(f"wrote {opts.out / 'results.md'} and {opts.out / 'sampler_study.png'}")
