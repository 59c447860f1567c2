"""The table of a benchmark folder: for each Tandem run NAME (NAME.json its config, NAME.log its output,
NAME/metrics.jsonl its steps) the measured tokens/s, model TFLOP/s per GPU and peak GiB per GPU beside the
planner's predictions printed by the preflight, with the errors; for each torch_*.log the reference script's
RESULT line. Writes OUT/results.json. Usage: python3 bench/run_summary.py OUT_DIR
With --speed (bench/gpu_speed.sh's folder): one row per model, Tandem (tandem_KEY) beside PyTorch compiled and eager
(torch_KEY_compile, torch_KEY_eager), the ratio to compiled, model TFLOP/s per GPU as a fraction of the bf16 GEMM
peak that a --probe run measured, and peak GiB with the planner's predicted peak; then one line per row with
the ratios to compiled and eager and the peaks side by side; then, for a model run at more than one micro-batch,
Tandem's fastest over compiled PyTorch's fastest; writes OUT/speed.json. gpt and llama configs alike.
Usage: python3 bench/run_summary.py --speed OUT_DIR
With --fp8 (bench/gpu_fp8.sh's folder): per shape KEY, Tandem bf16 (KEY_bf16), Tandem fp8 (KEY_fp8) and torchao float8
(KEY_torchao): tok/s, peak GiB, fp8 over bf16 and over torchao, the first and last losses, and a line for each other
recipe run (KEY_fp8_rowwise, KEY_fp8_blockwise); writes OUT/fp8.json.
Usage: python3 bench/run_summary.py --fp8 OUT_DIR
"""
import glob, json, os, re, statistics, sys


def gpt_parameters(m):
    V, T, d, L = m["vocab_size"], m["seq_len"], m["dim"], m["layers"]
    return V * d + T * d + L * (12 * d * d + 13 * d) + 2 * d + d * V  # untied head, biases, LayerNorms


def llama_parameters(m):
    """nn::llama_parameter_count: every logical parameter once (a tied head adds none), as the Llama reference
    script counts model.parameters()."""
    V, C, F, H = m["vocab_size"], m["hidden_size"], m["intermediate_size"], m["num_attention_heads"]
    Hkv = m.get("num_key_value_heads") or H
    D = m.get("head_dim") or C // H
    bias = m.get("attention_bias", False)
    block = 2 * C + (H + 2 * Hkv) * D * (C + bias) + H * D * C + bias * C + 3 * F * C
    return V * C + m["num_hidden_layers"] * block + C + (0 if m.get("tie_word_embeddings", False) else V * C)


def model_label(m):
    if m["type"] == "llama":
        return "llama d%(hidden_size)d L%(num_hidden_layers)d" % m
    return "gpt d%(dim)d L%(layers)d" % m


def model_flops_per_token(m):
    """6 N + 12 L d T, as both reference scripts count it (d the hidden size)."""
    if m["type"] == "llama":
        return 6 * llama_parameters(m) + 12 * m["num_hidden_layers"] * m["hidden_size"] * m["seq_len"]
    return 6 * gpt_parameters(m) + 12 * m["layers"] * m["dim"] * m["seq_len"]


def tandem_run(out, name):
    cfg = json.load(open(f"{out}/{name}.json"))
    text = open(f"{out}/{name}.log").read()
    e = {"model": model_label(cfg["model"]), "micro": cfg.get("train_micro_batch_size_per_gpu")}
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
    r = json.loads(m.group(1)) if m else {"error": "no RESULT line"}
    if r.get("oom"):
        r["error"] = "out of memory"
    return r


def speed(out):
    results = {name: torch_result(out, name) for name in
               (os.path.basename(p)[:-4] for p in sorted(glob.glob(f"{out}/torch_*.log")))}
    peak = next((r["gemm_bf16_tflops"] for r in results.values() if r.get("gemm_bf16_tflops")), None)
    print("bf16 GEMM peak (PyTorch, 8192^3): " + (f"{peak:.0f} TFLOP/s" if peak else "not measured"))

    def cell(v, fmt, width):
        return format(v, fmt).rjust(width) if isinstance(v, (int, float)) else str(v or "-").rjust(width)

    head = (f"{'model':20s} {'Tandem':>8s} {'eager':>8s} {'compiled':>8s} {'T/comp':>6s} | {'TFLOP/s per GPU':>23s} "
            f"| {'of GEMM peak':>17s} | {'peak GiB':>27s}")
    print(head)
    print(f"{'':20s} {'tok/s':>8s} {'tok/s':>8s} {'tok/s':>8s} {'':6s} | {'Tandem eager compiled':>23s} "
          f"| {'Tandem compiled':>17s} | {'Tandem planned eager compiled':>27s}")
    rows = {}
    configs = {m.group(1): p for p in glob.glob(f"{out}/tandem_*.json")
               if (m := re.fullmatch(r"tandem_(\w+)\.json", os.path.basename(p)))}
    for key in sorted(configs, key=lambda k: os.path.getmtime(configs[k])):  # in the order they ran
        t = tandem_run(out, "tandem_" + key) if os.path.exists(f"{out}/tandem_{key}.log") else {"error": "not run"}
        e, c = results.get(f"torch_{key}_eager", {}), results.get(f"torch_{key}_compile", {})
        ratio = t.get("tokens_per_s") / c["tokens_per_s"] if t.get("tokens_per_s") and c.get("tokens_per_s") else None
        frac = lambda tf: tf / peak if tf and peak else None
        label = f"{t['model']} m{t['micro']}" if t.get("model") else key
        rows[key] = {"model": t.get("model"), "label": label, "tandem": t, "torch_eager": e, "torch_compile": c,
                     "ratio_to_compiled": ratio, "gemm_peak_tflops": peak}
        print(f"{label:20s} {cell(t.get('tokens_per_s'), '.0f', 8)} "
              f"{cell(e.get('tokens_per_s'), '.0f', 8)} {cell(c.get('tokens_per_s'), '.0f', 8)} "
              f"{cell(ratio, '.3f', 6)} | {cell(t.get('tflops_per_gpu'), '.1f', 7)} "
              f"{cell(e.get('model_tflops_per_gpu'), '.1f', 7)} {cell(c.get('model_tflops_per_gpu'), '.1f', 7)} "
              f"| {cell(frac(t.get('tflops_per_gpu')), '.1%', 8)} {cell(frac(c.get('model_tflops_per_gpu')), '.1%', 8)} "
              f"| {cell(t.get('peak_gib_per_gpu'), '.2f', 6)} {cell(t.get('predicted_peak_gib'), '.2f', 7)} "
              f"{cell(e.get('peak_mem_GiB'), '.2f', 6)} {cell(c.get('peak_mem_GiB'), '.2f', 6)}")
        for label, r in (("Tandem", t), ("eager", e), ("compiled", c)):
            if r.get("error"):
                print(f"  {label}: {r['error']}")
    print("ratios (Tandem tok/s over PyTorch's; Tandem's peak beside the planner's prediction and PyTorch's):")
    for key, r in rows.items():
        t, e, c = r["tandem"], r["torch_eager"], r["torch_compile"]
        over = lambda other: (f"{t['tokens_per_s'] / other['tokens_per_s']:.3f}x"
                              if t.get("tokens_per_s") and other.get("tokens_per_s") else "-")
        peak, pred = t.get("peak_gib_per_gpu"), t.get("predicted_peak_gib")
        err = f" ({(pred / peak - 1) * 100:+.1f}%)" if peak and pred else ""
        mem = lambda other: (f"{peak - other['peak_mem_GiB']:+.2f} GiB"
                             if peak and other.get("peak_mem_GiB") else "-")
        print(f"  {r['label']:20s} Tandem/compiled {over(c)}, Tandem/eager {over(e)}; peak "
              f"{cell(peak, '.2f', 0)} GiB, planner predicted {cell(pred, '.2f', 0)} GiB{err}; "
              f"against compiled {mem(c)}, eager {mem(e)}")
    by_model = {}  # model -> its rows, one per micro-batch
    for r in rows.values():
        if r["model"]:
            by_model.setdefault(r["model"], []).append(r)
    for model, runs in by_model.items():
        tandem = [r["tandem"] for r in runs if r["tandem"].get("tokens_per_s")]
        compiled = [r["torch_compile"] for r in runs if r["torch_compile"].get("tokens_per_s")]
        if len(runs) < 2 or not tandem or not compiled:
            continue
        t = max(tandem, key=lambda x: x["tokens_per_s"])
        c = max(compiled, key=lambda x: x["tokens_per_s"])
        print(f"  {model}: best against best: Tandem {t['tokens_per_s']:.0f} tok/s (micro {t['micro']}) over "
              f"compiled {c['tokens_per_s']:.0f} (micro {c.get('micro')}): {t['tokens_per_s'] / c['tokens_per_s']:.3f}x")
    json.dump(rows, open(f"{out}/speed.json", "w"), indent=1)
    return all(r["tandem"].get("tokens_per_s") for r in rows.values())


def fp8(out):
    rows = {}
    keys = sorted({os.path.basename(p)[:-len("_bf16.json")] for p in glob.glob(f"{out}/*_bf16.json")},
                  key=lambda k: os.path.getmtime(f"{out}/{k}_bf16.json"))
    print(f"{'shape':8s} {'model':17s} {'bf16':>8s} {'fp8':>8s} {'torchao':>8s} {'fp8/bf16':>8s} {'fp8/ao':>7s} | "
          f"{'peak GiB bf16 fp8 torchao':>25s} | losses bf16, fp8 (first -> last)")
    ok = True
    for key in keys:
        b, f = (tandem_run(out, f"{key}_{v}") if os.path.exists(f"{out}/{key}_{v}.log") else {"error": "not run"}
                for v in ("bf16", "fp8"))
        t = torch_result(out, f"{key}_torchao")
        rows[key] = {"bf16": b, "fp8": f, "torchao": t}
        tps = [x.get("tokens_per_s") for x in (b, f, t)]
        peaks = [b.get("peak_gib_per_gpu"), f.get("peak_gib_per_gpu"), t.get("peak_mem_GiB")]
        ratio = lambda x, y: f"{x / y:.3f}x" if x and y else "-"
        cell = lambda v, w, fmt=".0f": format(v, fmt).rjust(w) if v else "-".rjust(w)
        losses = ", ".join(f"{x['loss_first']:.4f} -> {x['loss_last']:.4f}" if x.get("loss_first") else "-"
                           for x in (b, f))
        print(f"{key:8s} {b.get('model', ''):17s} {cell(tps[0], 8)} {cell(tps[1], 8)} {cell(tps[2], 8)} "
              f"{ratio(tps[1], tps[0]):>8s} {ratio(tps[1], tps[2]):>7s} | {cell(peaks[0], 7, '.2f')} "
              f"{cell(peaks[1], 7, '.2f')} {cell(peaks[2], 9, '.2f')} | {losses}")
        for name, x in (("bf16", b), ("fp8", f), ("torchao", t)):
            if x.get("error"):
                print(f"  {key}_{name}: {x['error']}")
        # The other recipes (KEY_fp8_RECIPE), a line each.
        for recipe in ("rowwise", "blockwise"):
            if not os.path.exists(f"{out}/{key}_fp8_{recipe}.log"):
                continue
            r = rows[key][f"fp8_{recipe}"] = tandem_run(out, f"{key}_fp8_{recipe}")
            tr = r.get("tokens_per_s")
            print(f"  {key} fp8 {recipe:9s} {cell(tr, 8)} tok/s, {ratio(tr, tps[0])} bf16, {ratio(tr, tps[1])} "
                  f"tensorwise, {ratio(tr, tps[2])} torchao | peak {cell(r.get('peak_gib_per_gpu'), 7, '.2f')} GiB | "
                  + (f"{r['loss_first']:.4f} -> {r['loss_last']:.4f}" if r.get("loss_first") else r.get("error", "-")))
        ok = ok and bool(tps[0] and tps[1])
    json.dump(rows, open(f"{out}/fp8.json", "w"), indent=1)
    return ok


def main(out):
    res = {}
    for log in sorted(glob.glob(f"{out}/*.log")):
        name = os.path.basename(log)[:-4]
        if name.startswith("torch_"):
            r = torch_result(out, name)
            kind = "llama" if "shape" in r else "gpt"  # the Llama reference script names its shape
            res[name] = {"model": "%s d%s L%s" % (kind, r.get("d"), r.get("layers")), "gpus": r.get("gpus"),
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
    if sys.argv[1] == "--fp8":
        sys.exit(0 if fp8(sys.argv[2]) else 1)
    main(sys.argv[1])
