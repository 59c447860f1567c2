"""DeepSpeed's monitors end to end, read back by TensorBoard's own reader.

Usage: monitor_check.py TANDEM_BINARY.

Trains a small gpt on 2 processes in fp16 with a held-out loss, "tensorboard" and "csv_monitor" enabled, then resumes it
for more steps. TensorBoard's EventAccumulator must read every scalar of every step back from the event files, at
DeepSpeed's step (samples so far: step x train_batch_size) and with the value metrics.jsonl has (as float32, TensorBoard's
simple_value); the CSV files must hold DeepSpeed's columns and the same values exactly. The resumed run adds a new event
file beside the first, which stays as it was. Prints one PASS or FAIL line per check and "N passed, M failed".
"""

import csv
import glob
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

results = {"passed": 0, "failed": 0}
BATCH = 8


def check(name, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + name + ("" if ok or not detail else ": " + detail), flush=True)
    results["passed" if ok else "failed"] += 1
    return ok


# Tag -> the metrics.jsonl key it carries.
TAGS = {"Train/Samples/train_loss": "loss", "Train/Samples/lr": "lr", "Train/Samples/loss_scale": "loss_scale",
        "Train/Samples/grad_norm": "grad_norm", "Train/Samples/val_loss": "val_loss",
        "Train/Samples/tokens_per_s": "tokens_per_s", "Train/Samples/peak_memory_bytes": "peak_bytes"}


def expected(metrics):
    want = {tag: [] for tag in TAGS}
    for m in metrics:
        for tag, key in TAGS.items():
            if key in m:
                want[tag].append((m["step"] * BATCH, m[key]))
    return want


def read_events(folder):
    acc = EventAccumulator(folder, size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def main():
    tandem = sys.argv[1]
    work = tempfile.mkdtemp()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    cfg = {"model": {"type": "gpt", "vocab_size": 64, "seq_len": 16, "dim": 32, "layers": 2, "heads": 4},
           "data": {"type": "synthetic"}, "eval": {"data": {"type": "synthetic"}, "every": 2, "steps": 1},
           "train_batch_size": BATCH, "steps": 6, "seed": 3, "fp16": {"enabled": True},
           "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 4}},
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "checkpoint": {"every": 3},
           "tensorboard": {"enabled": True, "output_path": os.path.join(work, "tb"), "job_name": "gpt"},
           "csv_monitor": {"enabled": True}}
    path = os.path.join(work, "cfg.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    run = os.path.join(work, "run")
    p = subprocess.run([tandem, "train", "-n", "2", path, "--out", run], env=env, capture_output=True, text=True,
                       timeout=300)
    if not check("a run with tensorboard and csv_monitor trains", p.returncode == 0, (p.stdout + p.stderr)[-2000:]):
        return
    check("it says where the event files and the CSV files go",
          "tensorboard: " + os.path.join(work, "tb", "gpt", "events.out.tfevents.") in p.stdout and
          "csv_monitor: " + os.path.join(run, "DeepSpeedJobName") in p.stdout, p.stdout[:1500])
    with open(os.path.join(run, "metrics.jsonl")) as f:
        metrics = [json.loads(line) for line in f]
    want = expected(metrics)
    got = read_events(os.path.join(work, "tb", "gpt"))
    check("TensorBoard reads DeepSpeed's tags and Tandem's", sorted(got) == sorted(want),
          "%s vs %s" % (sorted(got), sorted(want)))
    for tag, rows in want.items():
        have = got.get(tag, [])
        ok = [s for s, _ in have] == [s for s, _ in rows] and len(rows) > 0 and all(
            np.float32(v) == np.float32(w) for (_, v), (_, w) in zip(have, rows))
        check("%s: every step read back by TensorBoard, at samples, with metrics.jsonl's value" % tag, ok,
              "%s vs %s" % (have, rows))

    csv_dir = os.path.join(run, "DeepSpeedJobName")
    for tag, rows in want.items():
        name = os.path.join(csv_dir, tag.replace("/", "_") + ".csv")
        if not os.path.exists(name):
            check(tag + ": CSV file " + os.path.basename(name), False, "missing")
            continue
        with open(name) as f:
            table = list(csv.reader(f))
        ok = table[0] == ["step", tag.split("/")[-1]] and [(int(r[0]), float(r[1])) for r in table[1:]] == rows
        check("%s: %s has DeepSpeed's columns and every step's value exactly" % (tag, os.path.basename(name)), ok,
              str(table[:3]))

    first = glob.glob(os.path.join(work, "tb", "gpt", "events.out.tfevents.*"))
    digest = hashlib.md5(open(first[0], "rb").read()).hexdigest() if len(first) == 1 else ""
    p = subprocess.run([tandem, "train", "-n", "2", path, "--resume", run, "--set", "steps=9"], env=env,
                       capture_output=True, text=True, timeout=300)
    if not check("the run resumes with its monitors", p.returncode == 0, (p.stdout + p.stderr)[-2000:]):
        return
    files = glob.glob(os.path.join(work, "tb", "gpt", "events.out.tfevents.*"))
    check("the resumed run writes a new event file and leaves the first as it was",
          len(files) == 2 and first[0] in files and hashlib.md5(open(first[0], "rb").read()).hexdigest() == digest,
          str(files))
    with open(os.path.join(run, "metrics.jsonl")) as f:
        metrics = [json.loads(line) for line in f]
    got = read_events(os.path.join(work, "tb", "gpt"))
    loss = got.get("Train/Samples/train_loss", [])
    check("TensorBoard reads both files: steps 1-9 of train_loss at samples 8..72",
          [s for s, _ in loss] == [8 * k for k in range(1, 10)], str(loss))
    with open(os.path.join(csv_dir, "Train_Samples_train_loss.csv")) as f:
        table = list(csv.reader(f))
    check("the CSV files are continued: one header, then steps 1-9",
          table[0] == ["step", "train_loss"] and [int(r[0]) for r in table[1:]] == [8 * k for k in range(1, 10)],
          str(table))


if __name__ == "__main__":
    main()
    print("%d passed, %d failed" % (results["passed"], results["failed"]))
    sys.exit(1 if results["failed"] else 0)
