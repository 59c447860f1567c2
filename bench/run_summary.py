"""The table of a benchmark folder: for each Tandem run NAME (NAME.json its config, NAME.log its output,
NAME/metrics.jsonl its steps) the measured tokens/s, model TFLOP/s per GPU and peak GiB per GPU beside the
planner's predictions printed by the preflight, with the errors; for each torch_*.log the reference script's
RESULT line. Writes OUT/results.json. Usage: python3 bench/run_summary.py OUT_DIR
With --speed (bench/gpu_speed.sh's folder): one row per model, Tandem (tandem_KEY) beside PyTorch compiled and eager
(torch_KEY_compile, torch_KEY_eager), the ratio to compiled, model TFLOP/s per GPU as a fraction of the bf16 GEMM
peak that a --probe run measured, and peak GiB; writes OUT/speed.json.
Usage: python3 bench/run_summary.py --speed OUT_DIR
"""
import glob, json, os, re, statistics, sys


def gpt_parameters(m):
    V, T, d, L = m["vocab_size"], m["seq_len"], m["dim"], m["layers"]
    return V * d + T * d + L * (12 * d * d + 13 * d) + 2 * d + d * V  # untied head, biases, LayerNorms


def model_flops_per_token(m):
    return 6 * gpt_parameters(m) + 12 * m["layers"] * m["dim"] * m["seq_len"]


def tandem_run(out, name):
    cfg = json.load(open(f"{out}/{name}.json"))
    text = open(f"{out}/{name}.log").read()
    e = {"model": "gpt d%(dim)d L%(layers)d" % cfg["model"]}
    lay = re.search(r"layout dp (\d+) x pp (\d+) x tp (\d+)", text)
    auto = re.search(r"^parallel: auto -> (\S+)", text, re.M)
    if lay:
        e["gpus"] = int(lay.group(1)) * int(lay.group(2)) * int(lay.group(3))
        e["layout"] = auto.group(1) if auto else "dp%s pp%s tp%s" % lay.groups()
    pred = re.search(r"predicted peak per device: ([0-9.]+) (GiB|MiB).*predicted step [0-9.]+ ms \(([0-9.e+]+)", text)
    if pred:
        e["predicted_peak_gib"] = float(pred.group(1)) / (1024 if pred.group(2) == "MiB" else 1)
        e["predicted_tokens_per_s"] = float(pred.group(3))
    try:
        ms = [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl")]
    except OSError:
        ms = []
    if not ms or "gpus" not in e:
        e["error"] = (re.findall(r"^error.*$", text, re.M) or ["no steps"])[-1][:200]
        return e
    tps = statistics.median(x["tokens_per_s"] for x in (ms[2:] or ms))  # the first steps warm up
    e.update(tokens_per_s=tps, tflops_per_gpu=tps * model_flops_per_token(cfg["model"]) / e["gpus"] / 1e12,
             peak_gib_per_gpu=max(x["peak_bytes"] for x in ms) / 2**30, loss_first=ms[0]["loss"],
             loss_last=ms[-1]["loss"])
    return e


def torch_result(out, name):
    try:
        m = re.search(r"^RESULT (.*)$", open(f"{out}/{name}.log").read(), re.M)
    except OSError:
        return {"error": "not run"}
    return json.loads(m.group(1)) if m else {"error": "no RESULT line"}


def speed(out):
    results = {name: torch_result(out, name) for name in
               (os.path.basename(p)[:-4] for p in sorted(glob.glob(f"{out}/torch_*.log")))}
    peak = next((r["gemm_bf16_tflops"] for r in results.values() if r.get("gemm_bf16_tflops")), None)
    print("bf16 GEMM peak (PyTorch, 8192^3): " + (f"{peak:.0f} TFLOP/s" if peak else "not measured"))

    def cell(v, fmt, width):
        return format(v, fmt).rjust(width) if isinstance(v, (int, float)) else str(v or "-").rjust(width)

    head = (f"{'model':13s} {'Tandem':>8s} {'eager':>8s} {'compiled':>8s} {'T/comp':>6s} | {'TFLOP/s per GPU':>23s} "
            f"| {'of GEMM peak':>17s} | {'peak GiB':>20s}")
    print(head)
    print(f"{'':13s} {'tok/s':>8s} {'tok/s':>8s} {'tok/s':>8s} {'':6s} | {'Tandem eager compiled':>23s} "
          f"| {'Tandem compiled':>17s} | {'Tandem eager compiled':>20s}")
    rows = {}
    configs = {m.group(1): p for p in glob.glob(f"{out}/tandem_*.json")
               if (m := re.fullmatch(r"tandem_(\w+)\.json", os.path.basename(p)))}
    for key in sorted(configs, key=lambda k: os.path.getmtime(configs[k])):  # in the order they ran
        t = tandem_run(out, "tandem_" + key) if os.path.exists(f"{out}/tandem_{key}.log") else {"error": "not run"}
        e, c = results.get(f"torch_{key}_eager", {}), results.get(f"torch_{key}_compile", {})
        ratio = t.get("tokens_per_s") / c["tokens_per_s"] if t.get("tokens_per_s") and c.get("tokens_per_s") else None
        frac = lambda tf: tf / peak if tf and peak else None
        rows[key] = {"model": t.get("model"), "tandem": t, "torch_eager": e, "torch_compile": c,
                     "ratio_to_compiled": ratio, "gemm_peak_tflops": peak}
        print(f"{(t.get('model') or key):13s} {cell(t.get('tokens_per_s'), '.0f', 8)} "
              f"{cell(e.get('tokens_per_s'), '.0f', 8)} {cell(c.get('tokens_per_s'), '.0f', 8)} "
              f"{cell(ratio, '.3f', 6)} | {cell(t.get('tflops_per_gpu'), '.1f', 7)} "
              f"{cell(e.get('model_tflops_per_gpu'), '.1f', 7)} {cell(c.get('model_tflops_per_gpu'), '.1f', 7)} "
              f"| {cell(frac(t.get('tflops_per_gpu')), '.1%', 8)} {cell(frac(c.get('model_tflops_per_gpu')), '.1%', 8)} "
              f"| {cell(t.get('peak_gib_per_gpu'), '.2f', 6)} {cell(e.get('peak_mem_GiB'), '.2f', 6)} "
              f"{cell(c.get('peak_mem_GiB'), '.2f', 6)}")
        for label, r in (("Tandem", t), ("eager", e), ("compiled", c)):
            if r.get("error"):
                print(f"  {label}: {r['error']}")
    json.dump(rows, open(f"{out}/speed.json", "w"), indent=1)
    return all(r["tandem"].get("tokens_per_s") for r in rows.values())


def main(out):
    res = {}
    for log in sorted(glob.glob(f"{out}/*.log")):
        name = os.path.basename(log)[:-4]
        if name.startswith("torch_"):
            m = re.search(r"^RESULT (.*)$", open(log).read(), re.M)
            r = json.loads(m.group(1)) if m else {"error": "no RESULT line"}
            res[name] = {"model": "gpt d%s L%s" % (r.get("d"), r.get("layers")), "gpus": r.get("gpus"),
                         "layout": "%s micro %s" % (r.get("mode"), r.get("micro")),
                         "tokens_per_s": r.get("tokens_per_s"), "tflops_per_gpu": r.get("model_tflops_per_gpu"),
                         "peak_gib_per_gpu": r.get("peak_mem_GiB"), "error": r.get("error")}
        elif os.path.exists(f"{out}/{name}.json"):
            res[name] = tandem_run(out, name)
    print(f"{'run':14s} {'model':13s} {'layout':30s} {'GPUs':>4s} {'tok/s':>8s} {'TFLOP/s/GPU':>11s} "
          f"{'peak GiB':>8s} {'pred GiB':>8s} {'mem err':>7s} {'pred tok/s':>10s} {'time err':>8s}")
    for name, e in res.items():
        if not e.get("tokens_per_s"):
            print(f"{name:14s} {e.get('model', ''):13s} error: {e.get('error')}")
            continue
        pg, pt = e.get("predicted_peak_gib"), e.get("predicted_tokens_per_s")
        merr = f"{(pg / e['peak_gib_per_gpu'] - 1) * 100:+.1f}%" if pg else "-"
        terr = f"{(pt / e['tokens_per_s'] - 1) * 100:+.1f}%" if pt else "-"
        print(f"{name:14s} {e['model']:13s} {e['layout']:30s} {e['gpus']:4d} {e['tokens_per_s']:8.0f} "
              f"{e['tflops_per_gpu']:11.1f} {e['peak_gib_per_gpu']:8.2f} {pg if pg else float('nan'):8.2f} "
              f"{merr:>7s} {pt if pt else float('nan'):10.0f} {terr:>8s}")
    json.dump(res, open(f"{out}/results.json", "w"), indent=1)


if __name__ == "__main__":
    if sys.argv[1] == "--speed":
        sys.exit(0 if speed(sys.argv[2]) else 1)
    main(sys.argv[1])
